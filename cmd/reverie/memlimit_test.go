package main

import (
	"errors"
	"io/fs"
	"testing"
)

func fakeFiles(files map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
}

const meminfo = "MemTotal:       24576000 kB\nMemFree:         1000000 kB\n"

func TestMachineMemory(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		from  string
	}{
		{"meminfo only", map[string]string{"/proc/meminfo": meminfo}, 24576000 << 10, "/proc/meminfo"},
		{"cgroup v2 limit below the machine", map[string]string{
			"/proc/meminfo":             meminfo,
			"/sys/fs/cgroup/memory.max": "8589934592\n",
		}, 8 << 30, "/sys/fs/cgroup/memory.max"},
		{"cgroup v2 without a limit", map[string]string{
			"/proc/meminfo":             meminfo,
			"/sys/fs/cgroup/memory.max": "max\n",
		}, 24576000 << 10, "/proc/meminfo"},
		{"cgroup v1 limit", map[string]string{
			"/proc/meminfo": meminfo,
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "4294967296\n",
		}, 4 << 30, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"cgroup v1 without a limit", map[string]string{
			"/proc/meminfo": meminfo,
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 24576000 << 10, "/proc/meminfo"},
		{"cgroup limit above the machine", map[string]string{
			"/proc/meminfo":             meminfo,
			"/sys/fs/cgroup/memory.max": "107374182400\n",
		}, 24576000 << 10, "/proc/meminfo"},
		// A systemd unit's MemoryMax=, seen from the host's cgroup
		// namespace: the top of the hierarchy has no limit.
		{"cgroup v2 limit on the process's own cgroup", map[string]string{
			"/proc/meminfo":     meminfo,
			"/proc/self/cgroup": "0::/system.slice/reverie.service\n",
			"/sys/fs/cgroup/system.slice/reverie.service/memory.max": "4294967296\n",
		}, 4 << 30, "/sys/fs/cgroup/system.slice/reverie.service/memory.max"},
		{"cgroup v2 limit on a parent", map[string]string{
			"/proc/meminfo":     meminfo,
			"/proc/self/cgroup": "0::/user.slice/job-7/step\n",
			"/sys/fs/cgroup/user.slice/job-7/step/memory.max": "max\n",
			"/sys/fs/cgroup/user.slice/job-7/memory.max":      "2147483648\n",
			"/sys/fs/cgroup/user.slice/memory.max":            "8589934592\n",
		}, 2 << 30, "/sys/fs/cgroup/user.slice/job-7/memory.max"},
		{"cgroup v1 limit on the process's own cgroup", map[string]string{
			"/proc/meminfo":     meminfo,
			"/proc/self/cgroup": "12:cpu,cpuacct:/slurm/job_9\n7:memory:/slurm/job_9\n1:name=systemd:/x\n",
			"/sys/fs/cgroup/memory/slurm/job_9/memory.limit_in_bytes": "3221225472\n",
		}, 3 << 30, "/sys/fs/cgroup/memory/slurm/job_9/memory.limit_in_bytes"},
		// A container with a namespace of its own sees itself at the top.
		{"cgroup namespace", map[string]string{
			"/proc/meminfo":             meminfo,
			"/proc/self/cgroup":         "0::/\n",
			"/sys/fs/cgroup/memory.max": "1073741824\n",
		}, 1 << 30, "/sys/fs/cgroup/memory.max"},
		{"garbage", map[string]string{
			"/proc/meminfo":             "MemTotal: lots\n",
			"/sys/fs/cgroup/memory.max": "-1\n",
		}, 0, ""},
		{"nothing readable", nil, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := machineMemory(fakeFiles(tc.files))
			if got != tc.want || from != tc.from {
				t.Errorf("machineMemory = %d from %q, want %d from %q", got, from, tc.want, tc.from)
			}
		})
	}
}

func TestMemoryModeLimit(t *testing.T) {
	files := fakeFiles(map[string]string{"/sys/fs/cgroup/memory.max": "1000000000\n"})
	noEnv := func(string) string { return "" }
	if lim, from := memoryModeLimit(noEnv, files); lim != 900000000 || from != "/sys/fs/cgroup/memory.max" {
		t.Errorf("memoryModeLimit = %d from %q, want 900000000 from the cgroup", lim, from)
	}
	// GOMEMLIMIT set (to anything, "off" included): the runtime's value stands.
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "off"
		}
		return ""
	}
	if lim, from := memoryModeLimit(env, files); lim != 0 || from != "" {
		t.Errorf("with GOMEMLIMIT set: memoryModeLimit = %d from %q, want 0", lim, from)
	}
	fail := func(string) ([]byte, error) { return nil, errors.New("no /proc here") }
	if lim, _ := memoryModeLimit(noEnv, fail); lim != 0 {
		t.Errorf("with nothing readable: memoryModeLimit = %d, want 0", lim)
	}
}
