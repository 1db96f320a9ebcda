package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// A Dockerfile, read the way BuildKit reads the instructions this
// repository's Dockerfile uses. Anything else (RUN, ADD, a second stage)
// is refused, so the rehearsal never passes over a step it did not do.

type instruction struct {
	line int
	cmd  string // upper case
	rest string
}

type copyOp struct {
	src, dst string
	line     int
}

// imageSpec is the image a Dockerfile describes, with its build arguments
// applied.
type imageSpec struct {
	Base       string
	Labels     map[string]string
	Copies     []copyOp
	User       string
	Expose     []string
	Env        []string
	Workdir    string
	Entrypoint []string
	Cmd        []string
}

func parseDockerfile(b []byte) ([]instruction, error) {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			continue
		}
		cmd, rest, _ := strings.Cut(text, " ")
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), rest: strings.TrimSpace(rest)})
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: a continuation runs off the end of the file", start)
	}
	return out, nil
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expand substitutes $NAME, ${NAME} and ${NAME:-default}; a name that is
// not defined is an error rather than BuildKit's empty string, which would
// only surface later as a missing file.
func expand(s string, vars map[string]string, line int) (string, error) {
	var err error
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		g := varRef.FindStringSubmatch(m)
		name := g[1] + g[4]
		if v, ok := vars[name]; ok && (v != "" || g[2] == "") {
			return v
		}
		if g[2] != "" {
			return g[3]
		}
		if err == nil {
			err = fmt.Errorf("line %d: $%s is not defined (an ARG without a value)", line, name)
		}
		return ""
	})
	return out, err
}

// fields splits words, keeping double-quoted strings (quotes removed) whole.
// keyValues splits a LABEL's or an ENV's words at their first "=", failing
// for a word without one.
func keyValues(in instruction) ([][2]string, error) {
	f, err := fields(in.rest)
	if err != nil {
		return nil, err
	}
	out := make([][2]string, len(f))
	for i, kv := range f {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %s %q: want key=value", in.line, in.cmd, kv)
		}
		out[i] = [2]string{k, v}
	}
	return out, nil
}

func fields(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, any := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && in && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			in, any = !in, true
		case (c == ' ' || c == '\t') && !in:
			if any || cur.Len() > 0 {
				out = append(out, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteByte(c)
		}
	}
	if in {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if any || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
}

// evalDockerfile applies buildArgs (including the platform's TARGETARCH,
// TARGETOS and TARGETPLATFORM, as buildx passes them) to the instructions.
func evalDockerfile(instrs []instruction, buildArgs map[string]string) (imageSpec, error) {
	spec := imageSpec{Labels: map[string]string{}}
	global := map[string]string{}
	stage := map[string]string{}
	stages := 0
	declare := func(vars map[string]string, in instruction, scope map[string]string) error {
		name, def, hasDef := strings.Cut(in.rest, "=")
		if v, ok := buildArgs[name]; ok {
			vars[name] = v
			return nil
		}
		if hasDef {
			v, err := expand(strings.Trim(def, `"`), scope, in.line)
			if err != nil {
				return err
			}
			vars[name] = v
			return nil
		}
		if v, ok := global[name]; ok {
			vars[name] = v
		}
		return nil
	}
	for _, in := range instrs {
		if stages == 0 && in.cmd != "ARG" && in.cmd != "FROM" {
			return spec, fmt.Errorf("line %d: %s before FROM", in.line, in.cmd)
		}
		switch in.cmd {
		case "ARG":
			if stages == 0 {
				if err := declare(global, in, global); err != nil {
					return spec, err
				}
			} else if err := declare(stage, in, stage); err != nil {
				return spec, err
			}
		case "FROM":
			stages++
			if stages > 1 {
				return spec, fmt.Errorf("line %d: a second stage; the image is one stage over a prebuilt binary (the rehearsal refuses what it would not exercise)", in.line)
			}
			f, err := fields(in.rest)
			if err != nil {
				return spec, err
			}
			if len(f) != 1 {
				return spec, fmt.Errorf("line %d: FROM %s: want one image, no flags or AS", in.line, in.rest)
			}
			if spec.Base, err = expand(f[0], global, in.line); err != nil {
				return spec, err
			}
		case "LABEL", "ENV":
			kvs, err := keyValues(in)
			if err != nil {
				return spec, err
			}
			for _, kv := range kvs {
				if in.cmd == "LABEL" {
					// the value expands, the key does not
					if spec.Labels[kv[0]], err = expand(kv[1], stage, in.line); err != nil {
						return spec, err
					}
					continue
				}
				e, err := expand(kv[0]+"="+kv[1], stage, in.line)
				if err != nil {
					return spec, err
				}
				spec.Env = append(spec.Env, e)
			}
		case "COPY":
			f, err := fields(in.rest)
			if err != nil {
				return spec, err
			}
			if len(f) > 0 && strings.HasPrefix(f[0], "--") {
				return spec, fmt.Errorf("line %d: COPY %s: the rehearsal does not apply COPY flags; the binary's mode comes from dist/", in.line, f[0])
			}
			if len(f) < 2 {
				return spec, fmt.Errorf("line %d: COPY needs a source and a destination", in.line)
			}
			dst, err := expand(f[len(f)-1], stage, in.line)
			if err != nil {
				return spec, err
			}
			for _, s := range f[:len(f)-1] {
				src, err := expand(s, stage, in.line)
				if err != nil {
					return spec, err
				}
				d := dst
				if strings.HasSuffix(dst, "/") {
					d = path.Join(dst, path.Base(src))
				}
				spec.Copies = append(spec.Copies, copyOp{src: src, dst: d, line: in.line})
			}
		case "USER":
			u, err := expand(in.rest, stage, in.line)
			if err != nil {
				return spec, err
			}
			spec.User = u
		case "WORKDIR":
			w, err := expand(in.rest, stage, in.line)
			if err != nil {
				return spec, err
			}
			spec.Workdir = w
		case "EXPOSE":
			spec.Expose = append(spec.Expose, strings.Fields(in.rest)...)
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(in.rest), &argv); err != nil || len(argv) == 0 {
				return spec, fmt.Errorf("line %d: %s %s: want the exec form, a JSON array (the base has no shell)", in.line, in.cmd, in.rest)
			}
			if in.cmd == "ENTRYPOINT" {
				spec.Entrypoint = argv
			} else {
				spec.Cmd = argv
			}
		default:
			return spec, fmt.Errorf("line %d: %s: the rehearsal in scripts/dist.sh does not do %s (the base has no shell to RUN in); teach packaging/disttool or keep the Dockerfile to ARG, FROM, LABEL, ENV, COPY, USER, WORKDIR, EXPOSE, ENTRYPOINT, CMD", in.line, in.cmd, in.cmd)
		}
	}
	if stages == 0 {
		return spec, fmt.Errorf("no FROM")
	}
	if len(spec.Entrypoint) == 0 {
		return spec, fmt.Errorf("no ENTRYPOINT")
	}
	return spec, nil
}

// dockerignore holds .dockerignore's patterns, in order.
type dockerignore []string

func readDockerignore(contextDir string) (dockerignore, error) {
	b, err := os.ReadFile(filepath.Join(contextDir, ".dockerignore"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out dockerignore
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, nil
}

// excluded reports whether the build context leaves p out: the last
// pattern matching p or one of its parent directories decides, and a "!"
// pattern puts back what an earlier one left out.
func (d dockerignore) excluded(p string) bool {
	p = path.Clean(p)
	out := false
	for _, pat := range d {
		neg := strings.HasPrefix(pat, "!")
		pat = path.Clean(strings.TrimPrefix(pat, "!"))
		if matchSelfOrParent(pat, p) {
			out = !neg
		}
	}
	return out
}

func matchSelfOrParent(pat, p string) bool {
	for q := p; q != "." && q != "/"; q = path.Dir(q) {
		if ok, _ := path.Match(pat, q); ok {
			return true
		}
	}
	return false
}
