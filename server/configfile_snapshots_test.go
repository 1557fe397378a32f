package server

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRemoteSnapshotsConfig(t *testing.T) {
	const tables = "tables:\n  - {name: t, queue: 5}\n"
	const dir = "checkpoint_dir: /tmp/ckpt\n"
	good := []struct {
		name, yaml string
		want       SnapshotConfig
	}{
		{"absent", dir + tables, SnapshotConfig{}},
		{"null", dir + "remote_snapshots:\n" + tables, SnapshotConfig{}},
		{"url only", dir + "remote_snapshots: {url: 'file:///srv/snap'}\n" + tables,
			SnapshotConfig{URL: "file:///srv/snap"}},
		{"all", dir + `remote_snapshots:
  url: s3://bucket?region=us-east-1&prefix=trial-7/
  interval: 10m
  keep: 3
  timeout: 1h30m
` + tables, SnapshotConfig{URL: "s3://bucket?region=us-east-1&prefix=trial-7/", Interval: 10 * time.Minute, Keep: 3, Timeout: 90 * time.Minute}},
		{"zeros", dir + "remote_snapshots: {url: 's3://b?region=us-east-1', interval: 0, keep: 0, timeout: 0s}\n" + tables,
			SnapshotConfig{URL: "s3://b?region=us-east-1"}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := LoadConfigFile(writeConfig(t, "a.yaml", tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Snapshots != tt.want {
				t.Fatalf("Snapshots = %+v, want %+v", cfg.Snapshots, tt.want)
			}
		})
	}

	bad := []struct {
		name, yaml, want string
	}{
		{"no checkpoint_dir", "remote_snapshots: {url: 'file:///srv/snap'}\n" + tables,
			"remote_snapshots.url: requires checkpoint_dir"},
		{"unknown key", dir + "remote_snapshots: {url: 'file:///x', every: 1m}\n" + tables,
			`remote_snapshots.every: unknown key "every"; want one of url, interval, keep, timeout (line 2)`},
		{"not a mapping", dir + "remote_snapshots: s3://b\n" + tables, "remote_snapshots: must be a mapping"},
		{"bad scheme", dir + "remote_snapshots: {url: 'https://example.com/b'}\n" + tables,
			`remote_snapshots.url: remote: bad bucket URL: https://example.com/b: scheme "https" is not supported`},
		{"bare path", dir + "remote_snapshots: {url: /srv/snap}\n" + tables, `scheme "" is not supported`},
		{"interval number", dir + "remote_snapshots: {url: 's3://b?region=us-east-1', interval: 600}\n" + tables,
			`remote_snapshots.interval: must be a duration such as "90s", "10m" or "1h", got "600" (line 2)`},
		{"negative interval", dir + "remote_snapshots: {url: 's3://b?region=us-east-1', interval: -1m}\n" + tables,
			"remote_snapshots.interval: must be >= 0, got -1m"},
		{"negative keep", dir + "remote_snapshots: {url: 's3://b?region=us-east-1', keep: -1}\n" + tables,
			"remote_snapshots.keep: must be in [0, 1048576], got -1"},
		{"fractional keep", dir + "remote_snapshots: {url: 's3://b?region=us-east-1', keep: 1.5}\n" + tables,
			"remote_snapshots.keep: must be an integer"},
		{"interval under a second", dir + "remote_snapshots: {url: 's3://b?region=us-east-1', interval: 10ms}\n" + tables,
			"remote_snapshots.interval: must be 0 (no schedule) or at least 1s, got 10ms (line 2)"},
		{"timeout under a second", dir + "remote_snapshots: {url: 's3://b?region=us-east-1', timeout: 500ms}\n" + tables,
			"remote_snapshots.timeout: must be 0 (the default) or at least 1s, got 500ms (line 2)"},
		{"interval without url", dir + "remote_snapshots: {interval: 1m}\n" + tables,
			"remote_snapshots.url: interval, keep or timeout is set but url is empty"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfigFile(writeConfig(t, "a.yaml", tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, tt.want)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error does not wrap ErrInvalidConfig: %v", err)
			}
		})
	}
}

func TestSnapshotConfigValidate(t *testing.T) {
	base := func(sc SnapshotConfig) Config {
		c := DefaultConfig()
		c.CheckpointDir = "/tmp/ckpt"
		c.Snapshots = sc
		return c
	}
	tests := []struct {
		cfg  Config
		want string // "" for valid
	}{
		{base(SnapshotConfig{}), ""},
		{base(SnapshotConfig{URL: "file:///x", Interval: time.Minute, Keep: 1, Timeout: time.Minute}), ""},
		{base(SnapshotConfig{URL: "file:///x", Timeout: -time.Second}), "remote_snapshots.timeout: must be >= 0"},
		{base(SnapshotConfig{Keep: 3}), "url is empty"},
		{func() Config {
			c := base(SnapshotConfig{URL: "s3://b?region=us-east-1"})
			c.CheckpointDir = ""
			return c
		}(), "requires checkpoint_dir"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("Validate(%+v) = %v", tt.cfg.Snapshots, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.cfg.Snapshots, err, tt.want)
		}
	}
}

// TestWALConfigValidate: settings of the log without fsync, which turns it
// on, are refused rather than ignored: `--wal-dir` alone used to start a
// server without a log and without a word (found by review).
func TestWALConfigValidate(t *testing.T) {
	base := func(w WALConfig) Config {
		return Config{Tables: []TableConfig{QueueTable("q", 10)}, CheckpointDir: "/srv/ck", WAL: w}
	}
	for _, tt := range []struct {
		w    WALConfig
		want string
	}{
		{WALConfig{}, ""},
		{WALConfig{Fsync: "interval", Interval: time.Second, Dir: "/srv/wal"}, ""},
		{WALConfig{Fsync: "always", Dir: "/srv/wal", CheckpointAfterBytes: -1}, ""},
		{WALConfig{Dir: "/srv/wal"}, "fsync is not"},
		{WALConfig{Interval: time.Second}, "fsync is not"},
		{WALConfig{CheckpointAfterBytes: 1 << 20}, "fsync is not"},
	} {
		c := base(tt.w)
		err := c.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("Validate(%+v) = %v", tt.w, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.w, err, tt.want)
		}
	}
}
