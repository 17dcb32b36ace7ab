package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// mapping is one region of /proc/<pid>/smaps, sizes in KiB.
type mapping struct {
	name, perms   string
	size, pss     int64
	anon, private int64
}

// readSmaps reads every mapping of pid.
func readSmaps(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var maps []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") {
			// A region's header: "start-end perms offset dev inode [name]".
			m := mapping{name: "[anonymous]"}
			if len(fields) >= 2 {
				m.perms = fields[1]
			}
			if len(fields) >= 6 {
				m.name = strings.Join(fields[5:], " ")
			}
			maps = append(maps, m)
			continue
		}
		if len(maps) == 0 || len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		m := &maps[len(maps)-1]
		switch fields[0] {
		case "Size:":
			m.size = kb
		case "Pss:":
			m.pss = kb
		case "Anonymous:":
			m.anon = kb
		case "Private_Dirty:":
			m.private = kb
		}
	}
	return maps, sc.Err()
}

// smapsClass names what a QEMU mapping holds: the TCG translation cache is
// the anonymous region mapped read-write-execute (absent under KVM), guest
// RAM is the memory file the jail binds at /memory, thread stacks are 8 MiB
// anonymous regions.
func smapsClass(m mapping) string {
	switch {
	case m.name == "/memory" || strings.HasPrefix(m.name, "/memory "):
		return "guest RAM (memory file)"
	case m.name == "[anonymous]" && strings.HasPrefix(m.perms, "rwx"):
		return "TCG translation cache (rwx, absent under KVM)"
	case m.name == "[heap]":
		return "QEMU heap (brk)"
	case m.name == "[anonymous]" && m.size == 8192+4:
		return "thread stack"
	case m.name == "[anonymous]":
		return "other anonymous (glib/malloc arenas, TCG state)"
	case strings.HasPrefix(m.name, "/"):
		return "binary and libraries"
	default:
		return "other " + m.name
	}
}

// printSmaps prints pid's PSS by class of mapping, largest first.
func printSmaps(w io.Writer, pid int) error {
	maps, err := readSmaps(pid)
	if err != nil {
		return err
	}
	type sum struct {
		class           string
		n               int
		size, pss, anon int64
	}
	by := map[string]*sum{}
	for _, m := range maps {
		c := smapsClass(m)
		s := by[c]
		if s == nil {
			s = &sum{class: c}
			by[c] = s
		}
		s.n++
		s.size += m.size
		s.pss += m.pss
		s.anon += m.anon
	}
	var sums []*sum
	for _, s := range by {
		sums = append(sums, s)
	}
	sort.Slice(sums, func(i, j int) bool { return sums[i].pss > sums[j].pss })
	fmt.Fprintf(w, "  smaps of VMM %d by mapping class (KiB):\n", pid)
	fmt.Fprintf(w, "  %48s %5s %9s %8s %8s\n", "class", "maps", "size", "pss", "anon")
	for _, s := range sums {
		fmt.Fprintf(w, "  %48s %5d %9d %8d %8d\n", s.class, s.n, s.size, s.pss, s.anon)
	}
	// The anonymous regions that hold most of "other anonymous", by size
	// of region: malloc arenas of QEMU's threads reserve 64 MiB each.
	bySize := map[int64][2]int64{} // size: count, pss
	for _, m := range maps {
		if smapsClass(m) == "other anonymous (glib/malloc arenas, TCG state)" {
			v := bySize[m.size]
			bySize[m.size] = [2]int64{v[0] + 1, v[1] + m.pss}
		}
	}
	sizes := make([]int64, 0, len(bySize))
	for sz := range bySize {
		sizes = append(sizes, sz)
	}
	sort.Slice(sizes, func(i, j int) bool { return bySize[sizes[i]][1] > bySize[sizes[j]][1] })
	for i, sz := range sizes {
		if i == 6 {
			break
		}
		fmt.Fprintf(w, "    other anonymous regions of %d KiB: %d, pss %d KiB\n", sz, bySize[sz][0], bySize[sz][1])
	}
	fmt.Fprintf(w, "  threads: %d\n", countThreads(pid))
	return nil
}

func countThreads(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return len(ents)
}
