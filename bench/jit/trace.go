package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/bench/internal/rig"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/vmm/qemu"
	"github.com/space-sandbox/space/internal/worker"
)

// traceStep runs spec with QEMU's in_asm log on (HMP "log in_asm": QEMU
// writes each block it translates to its stderr, the VMM log at logPath),
// then names where the blocks' first instructions are: guest kernel
// functions (from the guest's /proc/kallsyms) or user space.
func traceStep(ctx context.Context, vm *qemu.VM, c worker.Guest, logPath string, spec agentproto.ProcessSpec, out io.Writer) error {
	st, err := os.Stat(logPath)
	if err != nil {
		return err
	}
	if _, err := vm.HumanMonitor(ctx, "log in_asm"); err != nil {
		return err
	}
	_, err = rig.Run(ctx, c, "traced", spec, nil)
	if _, lerr := vm.HumanMonitor(ctx, "log none"); err == nil {
		err = lerr
	}
	if err != nil {
		return err
	}
	f, err := os.Open(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(st.Size(), io.SeekStart); err != nil {
		return err
	}
	var pcs []uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	next := false
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "IN:") {
			next = true
			continue
		}
		if next && strings.HasPrefix(l, "0x") {
			a, _, _ := strings.Cut(l, ":")
			if v, err := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64); err == nil {
				pcs = append(pcs, v)
			}
			next = false
		}
	}
	var syms bytes.Buffer
	if _, err := rig.Run(ctx, c, "kallsyms", agentproto.ProcessSpec{Argv: []string{"cat", "/proc/kallsyms"}}, &syms); err != nil {
		return err
	}
	type sym struct {
		addr uint64
		name string
	}
	var table []sym
	for _, l := range strings.Split(syms.String(), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || (f[1] != "t" && f[1] != "T") {
			continue
		}
		if v, err := strconv.ParseUint(f[0], 16, 64); err == nil && v != 0 {
			table = append(table, sym{v, f[2]})
		}
	}
	sort.Slice(table, func(i, j int) bool { return table[i].addr < table[j].addr })
	counts := map[string]int{}
	areas := map[string]int{}
	user, kernel := 0, 0
	for _, pc := range pcs {
		if pc < 1<<63 {
			user++
			areas[userArea(pc)]++
			continue
		}
		kernel++
		i := sort.Search(len(table), func(i int) bool { return table[i].addr > pc }) - 1
		name := "(kernel, no symbol)"
		if i >= 0 {
			name = table[i].name
		}
		counts[name]++
		areas[kernelArea(name)]++
	}
	fmt.Fprintf(out, "traced %d blocks translated: %d guest kernel (%d functions), %d user space (%d kernel symbols known)\n",
		len(pcs), kernel, len(counts), user, len(table))
	fmt.Fprintln(out, "by area (kernel areas by function name):")
	printTop(out, areas, 100)
	fmt.Fprintln(out, "kernel functions with the most blocks:")
	printTop(out, counts, 40)
	return nil
}

func printTop(out io.Writer, counts map[string]int, n int) {
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return counts[names[i]] > counts[names[j]] })
	for i, k := range names {
		if i == n {
			break
		}
		fmt.Fprintf(out, "  %6d  %s\n", counts[k], k)
	}
}

// userArea names a user-space address by where x86-64 Linux maps things:
// a non-PIE static binary (the agent, Go) near 0x400000, PIE programs
// near 0x55..., shared libraries, ld.so and the vDSO near 0x7f....
func userArea(pc uint64) string {
	switch {
	case pc < 0x10000000:
		return "user: non-PIE binary (the agent, or a static program)"
	case pc >= 0x7f0000000000:
		return "user: shared libraries, ld.so, vDSO"
	default:
		return "user: PIE program"
	}
}

// kernelAreas are substrings of kernel function names, in the order tried.
var kernelAreas = []struct{ area, subs string }{
	{"kernel: cgroups, kernfs", "cgroup css_ kernfs mem_cgroup"},
	{"kernel: ext4, jbd2, block, virtio", "ext4 jbd2 journal blk bio virt vring virtblk block mpage submit_bh buffer _bh"},
	{"kernel: exec, ELF, fork, exit, wait", "exec elf bprm copy_process fork clone exit wait release_task notify_parent"},
	{"kernel: memory (faults, mappings, pages)", "page folio vma mmap munmap mprotect protect pte pmd pud p4d pgd fault tlb mas_ xas_ mapping rmap lru anon swap zap unmap move_ memcg slab kmem kmalloc vmalloc pcpu"},
	{"kernel: files, paths, pipes, ttys", "path file open dentry d_ inode namei lookup pipe tty pty fd link_ step_into walk_ mount"},
	{"kernel: scheduler, timers, RCU, irq", "sched schedule enqueue dequeue load_avg wake timer hrtimer rcu irq softirq tick clock"},
	{"kernel: syscalls, signals, epoll", "sys_ syscall signal epoll poll futex entry_"},
}

func kernelArea(name string) string {
	for _, a := range kernelAreas {
		for _, s := range strings.Fields(a.subs) {
			if strings.Contains(name, s) {
				return a.area
			}
		}
	}
	return "kernel: other"
}

// traceFirst creates one sandbox without a pool and traces its first
// command.
func traceFirst(agent, dataDir string) error {
	ctx := context.Background()
	w, rec, root, closeAll, err := openWorker(ctx, agent, dataDir)
	if err != nil {
		return err
	}
	defer closeAll()
	sp := benchSpec
	sp.ID = "sbx_jittrace"
	if _, err := w.CreateSandbox(ctx, sp); err != nil {
		return err
	}
	defer w.DeleteSandbox(ctx, sp.ID)
	c, err := w.Agent(ctx, sp.ID)
	if err != nil {
		return err
	}
	vm, err := rec.sandboxVM(ctx, w, sp.ID)
	if err != nil {
		return err
	}
	logPath := root + "/sandboxes/" + sp.ID + "/vm/qemu.log"
	return traceStep(ctx, vm, c, logPath, steps[0].spec, os.Stdout)
}
