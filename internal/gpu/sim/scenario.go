package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vramguard/vramguard/internal/units"
)

// Scenario is a simulated machine: its GPUs and the processes that come and
// go on them. It is read from a JSON file (see docs/GPU.md for the format and
// examples/scenarios/ for samples).
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Duration is the scenario's length; with Loop the clock wraps around
	// it, otherwise it holds at the end. Zero means the latest time named in
	// the file.
	Duration  Duration      `json:"duration,omitempty"`
	Loop      bool          `json:"loop,omitempty"`
	Devices   []DeviceSpec  `json:"devices"`
	Processes []ProcessSpec `json:"processes"`
}

// DeviceSpec is one simulated GPU.
type DeviceSpec struct {
	Name  string `json:"name"`
	UUID  string `json:"uuid,omitempty"`
	Total Bytes  `json:"total"`
	// Baseline is memory in use that belongs to no listed process (the
	// driver's own, other users' contexts the scenario does not model).
	Baseline Bytes `json:"baseline,omitempty"`
	// Util is the device's SM utilisation in percent; -1 (or omitted with
	// no processes) means unknown.
	Util *int `json:"util,omitempty"`
	// MIG lists MIG instances carved out of this GPU, each reported after it.
	MIG []DeviceSpec `json:"mig,omitempty"`
}

// ProcessSpec is one process of the scenario. With Device set it holds GPU
// memory there; a process with no Device is host-only (a launcher, a
// DataLoader worker) and exists only so attribution can see it.
type ProcessSpec struct {
	// PID is a number, or a string naming an environment variable as
	// "$NAME" or "${NAME}" so a test can point the scenario at a real
	// process it started.
	PID PIDRef `json:"pid"`
	// Device is the device's position in the flattened device list (a MIG
	// instance counts after its parent); nil for a host-only process.
	Device *int `json:"device,omitempty"`
	// Start and End bound the process's life (End zero: until the end).
	Start Duration `json:"start,omitempty"`
	End   Duration `json:"end,omitempty"`
	// Memory is the GPU memory over time: piecewise linear between points,
	// holding the last value after the last point.
	Memory Curve `json:"memory,omitempty"`
	// SMUtil is the process's SM utilisation in percent: a number, or
	// [time, percent] points joined by straight lines (so a test scripts
	// a job that goes idle); nil means the driver reports none.
	SMUtil *Curve `json:"sm_util,omitempty"`
	// Host describes the process as /proc would. When it is nil the
	// process must be real: attribution reads it from the live /proc.
	Host *HostSpec `json:"host,omitempty"`
	// Raw marks a scrambled driver record (PID 0, 0xFFFFFFFF, more memory
	// than the device): it is handed to the sanitizer as a driver would.
	Raw bool `json:"raw,omitempty"`
}

// HostSpec is what a simulated process looks like in /proc.
type HostSpec struct {
	PPID    PIDRef   `json:"ppid,omitempty"`
	PGID    PIDRef   `json:"pgid,omitempty"`
	Comm    string   `json:"comm"`
	Cmdline []string `json:"cmdline,omitempty"`
	// Cgroup is /proc/<pid>/cgroup verbatim (one or more lines).
	Cgroup string `json:"cgroup,omitempty"`
	RSS    Curve  `json:"rss,omitempty"`
	UID    int    `json:"uid,omitempty"`
	// User names UID for this scenario (so a scenario's users need not
	// exist on the machine playing it); without it the machine's passwd
	// database names the UID.
	User string `json:"user,omitempty"`
	// NSpid is the PID in each namespace after the host's (the host PID is
	// prepended), e.g. [1] for a container's init.
	NSpid []int `json:"nspid,omitempty"`
}

// Load reads and checks a scenario file.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("scenario file %s: %w", path, pe.Err)
		}
		return nil, fmt.Errorf("scenario file %s: %w", path, err)
	}
	s, err := Parse(b, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return s, nil
}

// Parse decodes a scenario; getenv resolves "$NAME" PIDs.
func Parse(b []byte, getenv func(string) string) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	if err := s.resolve(getenv); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Scenario) resolve(getenv func(string) string) error {
	n := len(s.flatDevices())
	if len(s.Devices) == 0 && len(s.Processes) > 0 {
		return fmt.Errorf("processes but no devices")
	}
	for i, d := range s.Devices {
		if d.Total == 0 {
			return fmt.Errorf("device %d (%s): total memory missing", i, d.Name)
		}
	}
	var last time.Duration
	for i := range s.Processes {
		p := &s.Processes[i]
		if err := p.PID.resolve(getenv); err != nil {
			return fmt.Errorf("process %d: pid: %w", i, err)
		}
		if p.Host != nil {
			if err := p.Host.PPID.resolve(getenv); err != nil {
				return fmt.Errorf("process %d: ppid: %w", i, err)
			}
			if err := p.Host.PGID.resolve(getenv); err != nil {
				return fmt.Errorf("process %d: pgid: %w", i, err)
			}
			if p.Host.Comm == "" {
				return fmt.Errorf("process %d (pid %d): host.comm missing", i, p.PID.N)
			}
		}
		if p.Device != nil && (*p.Device < 0 || *p.Device >= n) {
			return fmt.Errorf("process %d (pid %d): device %d out of range (scenario has %d)", i, p.PID.N, *p.Device, n)
		}
		if p.SMUtil != nil && p.SMUtil.max() > 100 {
			return fmt.Errorf("process %d (pid %d): sm_util above 100%%", i, p.PID.N)
		}
		if p.Device == nil && p.Host == nil {
			return fmt.Errorf("process %d (pid %d): neither device nor host given", i, p.PID.N)
		}
		if !p.Raw && p.PID.N <= 0 {
			return fmt.Errorf("process %d: pid %d must be positive (mark driver garbage with \"raw\": true)", i, p.PID.N)
		}
		if p.End != 0 && p.End < p.Start {
			return fmt.Errorf("process %d (pid %d): end before start", i, p.PID.N)
		}
		last = max(last, time.Duration(p.Start), time.Duration(p.End), p.Memory.last())
		if p.SMUtil != nil {
			last = max(last, p.SMUtil.last())
		}
		if p.Host != nil {
			last = max(last, p.Host.RSS.last())
		}
	}
	if s.Duration == 0 {
		s.Duration = Duration(last)
	}
	return nil
}

// flatDevices lists devices with MIG instances after their parent.
func (s *Scenario) flatDevices() []flatDevice {
	var out []flatDevice
	for i, d := range s.Devices {
		uuid := d.UUID
		if uuid == "" {
			uuid = fmt.Sprintf("GPU-sim-%08d-0000-0000-0000-%012d", i, i)
		}
		out = append(out, flatDevice{spec: d, index: i, uuid: uuid})
		for j, m := range d.MIG {
			mu := m.UUID
			if mu == "" {
				mu = fmt.Sprintf("MIG-sim-%08d-%04d-0000-0000-%012d", i, j, i)
			}
			out = append(out, flatDevice{spec: m, index: i, uuid: mu, parent: uuid, mig: j})
		}
	}
	return out
}

type flatDevice struct {
	spec   DeviceSpec
	index  int
	uuid   string
	parent string
	mig    int
}

// PIDRef is a PID given as a number or as "$ENV".
type PIDRef struct {
	N   int
	env string
}

func (p *PIDRef) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		s = strings.TrimSpace(s)
		if !strings.HasPrefix(s, "$") {
			return fmt.Errorf("pid %q: want a number or \"$ENV\"", s)
		}
		p.env = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(s, "$"), "{"), "}")
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("pid: %w", err)
	}
	p.N = int(n)
	return nil
}

func (p PIDRef) MarshalJSON() ([]byte, error) { return json.Marshal(p.N) }

func (p *PIDRef) resolve(getenv func(string) string) error {
	if p.env == "" {
		return nil
	}
	v := getenv(p.env)
	if v == "" {
		return fmt.Errorf("environment variable %s is not set", p.env)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return fmt.Errorf("$%s=%q is not a PID", p.env, v)
	}
	p.N = n
	return nil
}

// Duration is a time.Duration written as "90s" or "2m" (or a number of seconds).
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	return stringOrNumber(b, "duration", func(s string) error {
		v, err := time.ParseDuration(s)
		if err == nil {
			*d = Duration(v)
		}
		return err
	}, func(f float64) { *d = Duration(f * float64(time.Second)) })
}

// stringOrNumber decodes a JSON value written either as a string, given to
// text, or as a number, given to num; an error decoding the number is
// "what: error".
func stringOrNumber[N any](data []byte, what string, text func(string) error, num func(N)) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		return text(s)
	}
	var n N
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	num(n)
	return nil
}

// Bytes is a size written as "80GiB", "512MiB", "1.5GB" or a plain number of bytes.
type Bytes uint64

// ParseBytes parses a size such as "80GiB" (see units.ParseBytes).
func ParseBytes(s string) (Bytes, error) {
	v, err := units.ParseBytes(s)
	return Bytes(v), err
}

func (b *Bytes) UnmarshalJSON(data []byte) error {
	return stringOrNumber(data, "size", func(s string) error {
		v, err := ParseBytes(s)
		if err == nil {
			*b = v
		}
		return err
	}, func(n uint64) { *b = Bytes(n) })
}

// Curve is a value over time: a single size, or a list of [time, size]
// points joined by straight lines.
type Curve struct {
	pts []point
}

type point struct {
	t time.Duration
	v float64
}

func (c *Curve) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] != '[' {
		var b Bytes
		if err := b.UnmarshalJSON(data); err != nil {
			return err
		}
		c.pts = []point{{0, float64(b)}}
		return nil
	}
	var raw [][2]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("curve: want a size or [[time, size], ...]: %w", err)
	}
	for _, r := range raw {
		var d Duration
		if err := d.UnmarshalJSON(r[0]); err != nil {
			return err
		}
		var b Bytes
		if err := b.UnmarshalJSON(r[1]); err != nil {
			return err
		}
		c.pts = append(c.pts, point{time.Duration(d), float64(b)})
	}
	sort.SliceStable(c.pts, func(i, j int) bool { return c.pts[i].t < c.pts[j].t })
	return nil
}

// At returns the value at t.
func (c Curve) At(t time.Duration) uint64 {
	if len(c.pts) == 0 {
		return 0
	}
	if t <= c.pts[0].t {
		return uint64(c.pts[0].v)
	}
	for i := 1; i < len(c.pts); i++ {
		a, b := c.pts[i-1], c.pts[i]
		if t <= b.t {
			f := float64(t-a.t) / float64(b.t-a.t)
			return uint64(a.v + f*(b.v-a.v))
		}
	}
	return uint64(c.pts[len(c.pts)-1].v)
}

func (c Curve) max() float64 {
	m := 0.0
	for _, p := range c.pts {
		m = max(m, p.v)
	}
	return m
}

func (c Curve) last() time.Duration {
	if len(c.pts) == 0 {
		return 0
	}
	return c.pts[len(c.pts)-1].t
}
