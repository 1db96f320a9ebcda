package units

import (
	"fmt"
	"strings"
)

// Plural says n things: "1 sample", "2 samples", "1 process", "3 processes".
func Plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	if strings.HasSuffix(thing, "s") {
		return fmt.Sprintf("%d %ses", n, thing)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
