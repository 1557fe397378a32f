package main

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// machineMemoryShare is the part of the machine's (or the cgroup's) memory
// that `reverie serve` in memory mode lets the Go heap reach before the
// collector works harder to stay under it.
const machineMemoryShare = 0.9

// machineMemory returns the memory available to this process: the
// smallest of its cgroups' limits (memory.max under cgroup v2,
// memory.limit_in_bytes under v1) and the machine's MemTotal, with the
// name of the file it came from. It returns 0 and "" when none can be
// read.
func machineMemory(readFile func(string) ([]byte, error)) (int64, string) {
	var best int64
	var from string
	consider := func(n int64, file string) {
		if n > 0 && (best == 0 || n < best) {
			best, from = n, file
		}
	}
	for _, file := range cgroupLimitFiles(readFile) {
		b, err := readFile(file)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(s, 10, 64)
		// "max" (v2) and a page-rounded MaxInt64 (v1) mean no limit.
		if err != nil || n >= math.MaxInt64/2 {
			continue
		}
		consider(n, file)
	}
	if b, err := readFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb < math.MaxInt64/1024 {
					consider(kb*1024, "/proc/meminfo")
				}
				break
			}
		}
	}
	return best, from
}

// cgroupLimitFiles lists the files that may hold a memory limit on this
// process: those of its own cgroup and of each cgroup above it, as
// /proc/self/cgroup names them, then those at the top of the hierarchy.
// A systemd unit's MemoryMax= or a batch scheduler's job limit is on a
// cgroup below the top, which a container with a cgroup namespace of its
// own sees as the top.
func cgroupLimitFiles(readFile func(string) ([]byte, error)) []string {
	var files []string
	if b, err := readFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			// hierarchy-ID:controllers:path
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
				continue
			}
			var dir, name string
			switch {
			case f[0] == "0" && f[1] == "": // v2
				dir, name = "/sys/fs/cgroup", "memory.max"
			case slices.Contains(strings.Split(f[1], ","), "memory"): // v1
				dir, name = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
			default:
				continue
			}
			for p, depth := path.Clean(f[2]), 0; p != "/" && depth < 64; p, depth = path.Dir(p), depth+1 {
				files = append(files, dir+p+"/"+name)
			}
		}
	}
	return append(files, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
}

// memoryModeLimit is the Go soft memory limit for a memory-mode server:
// machineMemoryShare of the memory machineMemory finds, or 0 when GOMEMLIMIT
// is set (the runtime has applied it) or no memory size can be read.
//
// In memory mode the live heap is the replay buffer, and at GOGC=100 the
// collector lets the heap grow to twice it: a 12 GB buffer on a 16 GB
// machine would be killed for memory long before the buffer is full. With
// the limit the collector runs more often as the heap nears it instead,
// and it is not felt until then.
func memoryModeLimit(getenv func(string) string, readFile func(string) ([]byte, error)) (limit int64, from string) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, ""
	}
	n, from := machineMemory(readFile)
	if n == 0 {
		return 0, ""
	}
	return int64(float64(n) * machineMemoryShare), from
}

// setMemoryModeLimit applies memoryModeLimit to this process and returns
// the limit in force and where its size came from ("" when not set here).
func setMemoryModeLimit() (int64, string) {
	lim, from := memoryModeLimit(os.Getenv, os.ReadFile)
	if lim > 0 {
		debug.SetMemoryLimit(lim)
	}
	return debug.SetMemoryLimit(-1), from
}
