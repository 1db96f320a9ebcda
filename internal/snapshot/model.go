// Package snapshot reads PyTorch CUDA memory snapshots
// (torch.cuda.memory._snapshot / _dump_snapshot, the C++ writer's
// _memory_snapshot_pickled, or the same schema as JSON) into a typed model,
// and computes what the snapshot command and the dashboard show: per device
// totals, fragmentation, allocation sites, the trace, an OOM's account and
// the difference between two snapshots.
//
// Decoding never executes anything: a pickle that holds a global, a call or a
// persistent id is refused as not a snapshot. Every size read from the file is
// bounded (Limits). Frames and stacks shared in the file stay shared in the
// model: a stack recorded for a thousand trace entries is one *Stack.
//
// The package must never print, read anything but the file it is given, or
// import the command line or the agent.
package snapshot

// Schema is the layout a snapshot was written in, named for the first torch
// release that wrote it.
type Schema string

// The schemas torch has written.
const (
	// Schema113 is torch 1.13's bare list of segments, each block with its
	// allocation history.
	Schema113 Schema = "1.13"
	// Schema20 is {segments, device_traces}, blocks still with history.
	Schema20 Schema = "2.0"
	// Schema21 has blocks with address, requested_size and frames.
	Schema21 Schema = "2.1"
	// Schema22 adds time_us to trace entries.
	Schema22 Schema = "2.2"
	// Schema23 adds allocator_settings.
	Schema23 Schema = "2.3"
)

// keySet records which keys a record of the file held, so that the export
// writes what was read: no key the file did not have, none it had left out.
// Each record type has its own bits.
type keySet uint16

// A frame's keys.
const (
	keyFrameName keySet = 1 << iota
	keyFrameFilename
	keyFrameLine
	keyFrameLineUnsigned // line holds the bits of an integer from 2^63 to 2^64-1
)

// A segment's keys.
const (
	keySegDevice keySet = 1 << iota
	keySegAddress
	keySegTotal
	keySegAllocated
	keySegActive
	keySegRequested
	keySegStream
	keySegType
	keySegPool
	keySegExpandable
	keySegFrames
	keySegBlocks
)

// A block's keys.
const (
	keyBlockAddress keySet = 1 << iota
	keyBlockSize
	keyBlockRequested
	keyBlockState
	keyBlockFrames
	keyBlockHistory
)

// A history entry's keys.
const (
	keyHistAddr keySet = 1 << iota
	keyHistRealSize
	keyHistFrames
)

// A trace entry's keys.
const (
	keyEntryAction keySet = 1 << iota
	keyEntryAddr
	keyEntryDeviceFree
	keyEntrySize
	keyEntryStream
	keyEntryTime
	keyEntryCompileContext
	keyEntryUserMetadata
	keyEntryFrames
)

// The root's keys (a dict; a bare list of segments has none).
const (
	keyRootSegments keySet = 1 << iota
	keyRootTraces
	keyRootSettings
	keyRootAnnotations
	keyRootUserMetadata
	keyRootList // the root is a bare list of segments (torch.cuda.memory_snapshot())
)

// Frame is one frame of a recorded stack. Frames are shared: every stack
// that holds the same frame points at the one Frame.
type Frame struct {
	File     string
	Line     int64
	Function string
	id       int32 // in the snapshot's frame table
	keys     keySet
}

// Stack is a recorded call stack, innermost frame first, shared by every
// block and trace entry recorded with it. It holds its frames as indices
// into the snapshot's frame table: no pointers for the collector to scan in
// the millions of references a long trace holds.
type Stack struct {
	ids []int32
	tab *frameTable
}

// frameTable is every frame of a snapshot, by index.
type frameTable struct {
	frames []*Frame
}

// Len is the number of frames.
func (s *Stack) Len() int { return len(s.ids) }

// Frame returns frame i, 0 being the innermost.
func (s *Stack) Frame(i int) *Frame { return s.tab.frames[s.ids[i]] }

// Frames returns the frames, innermost first.
func (s *Stack) Frames() []*Frame {
	out := make([]*Frame, len(s.ids))
	for i, id := range s.ids {
		out[i] = s.tab.frames[id]
	}
	return out
}

// State is a block's state, as the allocator names it.
type State uint8

// Block states.
const (
	Inactive State = iota
	ActiveAllocated
	ActivePendingFree
)

func (s State) String() string {
	switch s {
	case ActiveAllocated:
		return "active_allocated"
	case ActivePendingFree:
		return "active_pending_free"
	}
	return "inactive"
}

// History is one allocation a torch 1.13/2.0 block recorded; the last one
// of an allocated block is its live allocation.
type History struct {
	Addr     uint64
	RealSize int64
	Stack    *Stack
	keys     keySet
}

// Block is one block of a segment.
type Block struct {
	Address       uint64
	Size          int64
	RequestedSize int64
	HasRequested  bool // requested_size was recorded (torch >= 2.1)
	State         State
	keys          keySet
	Stack         *Stack // nil when none was recorded
	History       []History
}

// Requested is the size the program asked for: requested_size, or for the
// old schemas the live allocation's real_size.
func (b *Block) Requested() int64 {
	switch {
	case b.HasRequested:
		return b.RequestedSize
	case len(b.History) > 0:
		return b.History[len(b.History)-1].RealSize
	}
	return b.Size
}

// AllocStack is the stack of the block's live allocation: its frames, or
// the last history entry's.
func (b *Block) AllocStack() *Stack {
	if b.Stack != nil && b.Stack.Len() > 0 {
		return b.Stack
	}
	if n := len(b.History); n > 0 {
		return b.History[n-1].Stack
	}
	return b.Stack
}

// Segment is one cudaMalloc'd (or, expandable, mapped) range.
type Segment struct {
	Device        int
	Address       uint64
	TotalSize     int64
	AllocatedSize int64
	ActiveSize    int64
	RequestedSize int64
	Stream        int64
	Large         bool // segment_type "large"
	Expandable    bool
	Pool          [2]int64 // segment_pool_id; {0,0} is the default pool
	Stack         *Stack
	Blocks        []Block
	keys          keySet
}

// Action is what a trace entry records.
type Action uint8

// Trace actions, as the allocator names them.
const (
	ActionUnknown Action = iota
	ActionAlloc
	ActionFreeRequested
	ActionFreeCompleted
	ActionSegmentAlloc
	ActionSegmentFree
	ActionSegmentMap
	ActionSegmentUnmap
	ActionSnapshot
	ActionOOM
)

var actionNames = [...]string{"?", "alloc", "free_requested", "free_completed", "segment_alloc",
	"segment_free", "segment_map", "segment_unmap", "snapshot", "oom"}

func (a Action) String() string { return actionNames[a] }

// ParseAction maps a trace entry's action to its Action.
func ParseAction(s string) Action {
	for i, n := range actionNames {
		if n == s && i > 0 {
			return Action(i)
		}
	}
	return ActionUnknown
}

// TraceEntry is one event of a device's trace.
type TraceEntry struct {
	Action     Action
	keys       keySet
	Addr       uint64
	Size       int64
	Stream     int64
	TimeUS     int64 // 0 before torch 2.2
	DeviceFree int64 // oom entries: what the device had free
	Stack      *Stack
	// Context is compile_context and user_metadata (torch >= 2.6); nil
	// when both are empty.
	Context *TraceContext
}

// TraceContext is what torch >= 2.6 records with a trace entry beyond the
// allocation: the torch.compile context and the user's metadata.
type TraceContext struct {
	CompileContext string
	UserMetadata   string
}

func (c *TraceContext) compileContext() string {
	if c == nil {
		return ""
	}
	return c.CompileContext
}

func (c *TraceContext) userMetadata() string {
	if c == nil {
		return ""
	}
	return c.UserMetadata
}

// Snapshot is one decoded snapshot.
type Snapshot struct {
	Schema   Schema
	Segments []*Segment
	// Traces is each device's trace, indexed by device (absent before 2.0).
	Traces [][]*TraceEntry
	// HasTimes is whether trace entries carry time_us.
	HasTimes bool
	// AllocatorSettings are allocator_settings as key=value text.
	AllocatorSettings []Setting
	// ExternalAnnotations counts external_annotations entries.
	ExternalAnnotations int
	UserMetadata        string
	// Saturated counts integers the file held that do not fit 64 bits: each
	// was clamped to the nearest 64-bit value, and the commands say so.
	Saturated int
	// Frames and Stacks count the distinct frames and stacks.
	Frames, Stacks int

	// What the export writes back as it was read: the root's keys, and
	// allocator_settings, external_annotations and user_metadata as JSON.
	rootKeys                                keySet
	settingsJSON, annotationsJSON, metaJSON []byte
	// NotKept names what the export cannot write back (a value too large
	// or not plain data), for the command to say.
	NotKept []string
	// stackRefs are the stacks the shared-stack JSON form refers to by
	// index, filled from its stack table when the root is built.
	stackRefs map[int64]*Stack
	// bad is the first negative size read: the file is refused
	bad error
}

// Setting is one allocator setting.
type Setting struct {
	Key, Value string
}

// Devices returns the devices the snapshot covers: every device a segment
// names and every device with a trace, in order.
func (s *Snapshot) Devices() []int {
	n := len(s.Traces)
	for _, seg := range s.Segments {
		if seg.Device+1 > n {
			n = seg.Device + 1
		}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
