package testbin

import (
	"testing"

	"github.com/vramguard/vramguard/internal/store"
)

// OpenStore opens (creating it when new) the database of the state
// directory home, closed when t ends; a caller may close it sooner, as
// closing twice is harmless. (internal/store's own tests cannot use it:
// testbin imports store.)
func OpenStore(t testing.TB, home string) *store.Store {
	t.Helper()
	st, err := store.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
