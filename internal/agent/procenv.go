package agent

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// DefaultPath is the PATH a process gets unless its env says otherwise.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// userInfo is who a process runs as.
type userInfo struct {
	name     string
	uid, gid uint32
	groups   []uint32
	home     string
}

// lookupUser resolves a ProcessSpec.User ("" = root, a name, or uid[:gid])
// against etc (normally "/etc").
func lookupUser(etc, spec string) (*userInfo, error) {
	if spec == "" {
		spec = "root"
	}
	entries := readColon(filepath.Join(etc, "passwd"), 7)
	if uidStr, gidStr, hasGid := strings.Cut(spec, ":"); isNumber(uidStr) {
		uid, _ := strconv.ParseUint(uidStr, 10, 32)
		u := &userInfo{uid: uint32(uid), gid: uint32(uid), home: "/"}
		for _, e := range entries {
			if e[2] == uidStr {
				u.name, u.home = e[0], e[5]
				if g, err := strconv.ParseUint(e[3], 10, 32); err == nil {
					u.gid = uint32(g)
				}
				break
			}
		}
		if hasGid {
			g, err := strconv.ParseUint(gidStr, 10, 32)
			if err != nil {
				return nil, errdefs.New(errdefs.ErrInvalidArgument, "invalid user %q", spec)
			}
			u.gid = uint32(g)
		}
		u.groups = supplementary(etc, u.name, u.gid)
		return u, nil
	}
	for _, e := range entries {
		if e[0] != spec {
			continue
		}
		uid, err1 := strconv.ParseUint(e[2], 10, 32)
		gid, err2 := strconv.ParseUint(e[3], 10, 32)
		if err1 != nil || err2 != nil {
			break
		}
		u := &userInfo{name: spec, uid: uint32(uid), gid: uint32(gid), home: e[5]}
		u.groups = supplementary(etc, u.name, u.gid)
		return u, nil
	}
	if spec == "root" {
		return &userInfo{name: "root", home: "/root"}, nil
	}
	return nil, errdefs.New(errdefs.ErrInvalidArgument, "unknown user %q", spec)
}

func supplementary(etc, name string, primary uint32) []uint32 {
	groups := []uint32{primary}
	if name == "" {
		return groups
	}
	for _, e := range readColon(filepath.Join(etc, "group"), 4) {
		for _, m := range strings.Split(e[3], ",") {
			if m == name {
				if g, err := strconv.ParseUint(e[2], 10, 32); err == nil && uint32(g) != primary {
					groups = append(groups, uint32(g))
				}
			}
		}
	}
	return groups
}

func readColon(path string, fields int) [][]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		parts := strings.Split(line, ":")
		if len(parts) >= fields {
			out = append(out, parts)
		}
	}
	return out
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// buildEnv layers the spec's env over the configured defaults over a sane
// base environment.
func buildEnv(spec *agentproto.ProcessSpec, defaults map[string]string, u *userInfo) []string {
	env := map[string]string{"PATH": DefaultPath, "HOME": u.home}
	if u.home == "" {
		env["HOME"] = "/"
	}
	if u.name != "" {
		env["USER"], env["LOGNAME"] = u.name, u.name
	}
	if spec.PTY != nil {
		env["TERM"] = "xterm-256color"
	}
	for k, v := range defaults {
		env[k] = v
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

func envGet(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPath finds argv0 in the PATH of the process's own environment (not the
// agent's, which exec.LookPath would use).
func lookPath(argv0, cwd string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		p := argv0
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := isExecutable(p); err != nil {
			return "", errdefs.New(errdefs.ErrNotFound, "executable %q not found", argv0).WithCause(err)
		}
		return p, nil
	}
	for _, dir := range filepath.SplitList(envGet(env, "PATH")) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, argv0)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", errdefs.New(errdefs.ErrNotFound, "executable %q not found in PATH", argv0)
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: not executable", p)
	}
	return nil
}
