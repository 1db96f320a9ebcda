// Package lazyre is a regular expression compiled on first use. Every
// vramguard process runs every package's initialisation, the job's shim
// included, and the classifier's and attribution's hundred-odd patterns
// cost each of them milliseconds of CPU they mostly never use; a pattern
// declared with New costs nothing until it is matched. CompileAll compiles
// every pattern declared so far, so a test still catches a bad one at once.
package lazyre

import (
	"regexp"
	"sync"
)

// RE is a regular expression compiled when first used. It is safe for
// concurrent use.
type RE struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

var (
	mu  sync.Mutex
	all []*RE
)

// New declares expr; it panics at first use if expr does not compile, as
// regexp.MustCompile would at once.
func New(expr string) *RE {
	r := &RE{expr: expr}
	mu.Lock()
	all = append(all, r)
	mu.Unlock()
	return r
}

// CompileAll compiles every pattern declared so far and returns the first
// error.
func CompileAll() error {
	mu.Lock()
	list := append([]*RE(nil), all...)
	mu.Unlock()
	for _, r := range list {
		if _, err := regexp.Compile(r.expr); err != nil {
			return err
		}
	}
	return nil
}

// Regexp is the compiled expression.
func (r *RE) Regexp() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

func (r *RE) String() string                         { return r.expr }
func (r *RE) MatchString(s string) bool              { return r.Regexp().MatchString(s) }
func (r *RE) FindString(s string) string             { return r.Regexp().FindString(s) }
func (r *RE) FindStringIndex(s string) []int         { return r.Regexp().FindStringIndex(s) }
func (r *RE) FindStringSubmatch(s string) []string   { return r.Regexp().FindStringSubmatch(s) }
func (r *RE) FindStringSubmatchIndex(s string) []int { return r.Regexp().FindStringSubmatchIndex(s) }
func (r *RE) FindAllString(s string, n int) []string { return r.Regexp().FindAllString(s, n) }
func (r *RE) FindAllStringSubmatch(s string, n int) [][]string {
	return r.Regexp().FindAllStringSubmatch(s, n)
}
func (r *RE) ReplaceAllString(src, repl string) string { return r.Regexp().ReplaceAllString(src, repl) }
func (r *RE) SubexpNames() []string                    { return r.Regexp().SubexpNames() }
