// Package pickletest holds the hostile pickles every reader of the format is
// tested against: small files that claim much (floods of one-byte opcodes,
// sparse memo indices, a memo of millions of values, millions of dict keys)
// and containers that hold themselves.
package pickletest

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
)

// Bomb is one hostile pickle.
type Bomb struct {
	Name string
	Data []byte
	// Why is what the file does to a reader that does not bound it.
	Why string
}

func le32(b *bytes.Buffer, v uint32) {
	var x [4]byte
	binary.LittleEndian.PutUint32(x[:], v)
	b.Write(x[:])
}

// Cycle is a 49-byte pickle whose dict holds a tuple that holds the dict:
// any walk of it that neither bounds its depth nor remembers what it saw
// never ends.
func Cycle() []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02}q\x00(X\x08\x00\x00\x00segments]X\x0d\x00\x00\x00user_metadatah\x00\x85u.")
	return b.Bytes()
}

// SparseMemo writes n LONG_BINPUTs whose indices are 4096 apart.
func SparseMemo(n int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02N")
	for i := 0; i < n; i++ {
		b.WriteByte('r')
		le32(&b, uint32(i)*4096)
	}
	b.WriteString(".")
	return b.Bytes()
}

// Flood writes one value then n copies of op (a one-byte opcode).
func Flood(first string, op string, n int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x04" + first)
	b.Write(bytes.Repeat([]byte(op), n))
	if first == "" {
		b.WriteString("N")
	}
	b.WriteString(".")
	return b.Bytes()
}

// DictKeys writes one dict of n distinct int keys, all in one SETITEMS.
func DictKeys(n int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02}(")
	for i := 0; i < n; i++ {
		b.WriteByte('J')
		le32(&b, uint32(i))
		b.WriteByte('N')
	}
	b.WriteString("u.")
	return b.Bytes()
}

// DictKeysBatched writes one dict of n distinct int keys, each to None, as
// CPython's pickle.dumps(protocol=2) writes it: SETITEMS in batches of 1000,
// each key in the smallest of BININT1, BININT2 and BININT.
func DictKeysBatched(n int) []byte {
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = uint32(i)
	}
	return dictOf(keys)
}

// DictKeysShuffled is DictKeysBatched of the keys in a shuffled order (a
// dict built from shuffled keys): no key follows the one before it, so a
// reader finds each key among all the others.
func DictKeysShuffled(n int) []byte {
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = uint32(i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return dictOf(keys)
}

// dictOf writes a dict of the keys, each to None, as DictKeysBatched.
func dictOf(keys []uint32) []byte {
	var b bytes.Buffer
	n := len(keys)
	b.WriteString("\x80\x02}q\x00")
	for i, k := range keys {
		if i%1000 == 0 {
			b.WriteByte('(')
		}
		switch {
		case k < 1<<8:
			b.WriteByte('K')
			b.WriteByte(byte(k))
		case k < 1<<16:
			b.WriteByte('M')
			b.WriteByte(byte(k))
			b.WriteByte(byte(k >> 8))
		default:
			b.WriteByte('J')
			le32(&b, k)
		}
		b.WriteByte('N')
		if i%1000 == 999 || i == n-1 {
			b.WriteByte('u')
		}
	}
	b.WriteString(".")
	return b.Bytes()
}

// Bombs are the hostile pickles of every reader, at the sizes they were
// found at.
func Bombs() []Bomb {
	return []Bomb{
		{"cycle", Cycle(), "a dict holding a tuple holding the dict"},
		{"sparse LONG_BINPUT", SparseMemo(575 << 10 / 5), "memo indices 4096 apart: a paged memo allocates a page for each"},
		{"DUP", Flood("N", "2", 4<<20), "4 MiB of DUP: a stack of 4 M values"},
		{"EMPTY_LIST", Flood("", "]", 2<<20), "2 MiB of EMPTY_LIST: 2 M lists"},
		{"MEMOIZE", Flood("N", "\x94", 4_900_000), "one value memoised 4.9 M times"},
		{"None MEMOIZE", Flood("", "N\x94", 4_900_000), "4.9 M values memoised, all left on the stack"},
		{"None MEMOIZE POP", Flood("", "N\x940", 4_900_000), "4.9 M values memoised and popped"},
		{"EMPTY_LIST MEMOIZE POP", Flood("", "]\x940", 4_900_000), "4.9 M lists memoised and popped"},
		{"EMPTY_DICT MEMOIZE POP", Flood("", "}\x940", 4_900_000), "4.9 M dicts memoised and popped"},
		{"dict keys", DictKeys(2_400_000), "one SETITEMS of 2.4 M distinct keys"},
	}
}

// Dicts are dicts of millions of items written as CPython writes them: no
// flood for the proportional bounds, so a view that keeps a dict's items
// holds every one of them.
func Dicts() []Bomb {
	return []Bomb{
		{"dict keys batched", DictKeysBatched(2_400_000), "2.4 M distinct keys in SETITEMS batches of 1000: a dict of 2.4 M items"},
		{"dict keys shuffled", DictKeysShuffled(2_400_000), "the same keys shuffled: each key found among the others"},
	}
}

// Allocated is what f allocates, collected or not: an upper bound of what
// it holds at its peak (what the bomb tests hold each reader to).
func Allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}
