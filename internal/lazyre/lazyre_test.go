package lazyre

import (
	"sync"
	"testing"
)

func TestLazy(t *testing.T) {
	r := New(`(\d+) (MiB|GiB)`)
	if r.re != nil {
		t.Fatal("compiled before use")
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m := r.FindStringSubmatch("tried 20 MiB"); len(m) != 3 || m[1] != "20" {
				t.Errorf("match %q", m)
			}
		}()
	}
	wg.Wait()
	if !r.MatchString("1 GiB") || r.MatchString("x") {
		t.Error("MatchString")
	}
}

func TestCompileAllFindsABadPattern(t *testing.T) {
	if err := CompileAll(); err != nil {
		t.Fatalf("good patterns: %v", err)
	}
	New(`(unclosed`)
	if err := CompileAll(); err == nil {
		t.Error("a pattern that does not compile passed CompileAll")
	}
}
