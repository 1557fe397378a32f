package main

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// machineMemoryShare is the part of the machine's (or the cgroup's) memory
// that `reverie serve` in memory mode lets the Go heap reach before the
// collector works harder to stay under it.
const machineMemoryShare = 0.9

// machineMemory returns the memory available to this process: the
// smallest of the cgroup v2 limit (memory.max), the cgroup v1 limit
// (memory.limit_in_bytes) and the machine's MemTotal, with the name of the
// file it came from. It returns 0 and "" when none can be read.
func machineMemory(readFile func(string) ([]byte, error)) (int64, string) {
	var best int64
	var from string
	consider := func(n int64, file string) {
		if n > 0 && (best == 0 || n < best) {
			best, from = n, file
		}
	}
	for _, file := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
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
