package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStorageConfigYAML(t *testing.T) {
	const tables = "tables:\n  - {name: t, queue: 5}\n"
	good := []struct {
		yaml string
		want StorageConfig
	}{
		{"", StorageConfig{}},
		{"storage: {mode: memory}\n", StorageConfig{Mode: StorageMemory}},
		{"storage: {mode: hybrid, memory_limit_bytes: 1048576, dir: /var/spill}\n", StorageConfig{Mode: StorageHybrid, MemoryLimitBytes: 1 << 20, Dir: "/var/spill"}},
		{"storage:\n  mode: disk\n", StorageConfig{Mode: StorageDisk}},
	}
	for _, tt := range good {
		cfg, err := parseConfigFile("c.yaml", []byte(tables+tt.yaml))
		if err != nil || cfg.Storage != tt.want {
			t.Errorf("%q: got %+v, %v; want %+v", tt.yaml, cfg.Storage, err, tt.want)
		}
	}
	bad := []struct{ yaml, want string }{
		{"storage: {mode: tape}\n", `storage.mode: want memory, hybrid or disk, got "tape" (line 3)`},
		{"storage: {mode: hybrid}\n", "storage.memory_limit_bytes: hybrid mode needs a limit > 0, got 0"},
		{"storage: {mode: hybrid, memory_limit_bytes: 1.5}\n", "storage.memory_limit_bytes: must be an integer"},
		{"storage: {mode: disk, memory_limit_bytes: -1}\n", "storage.memory_limit_bytes: must be >= 0, got -1"},
		{"storage: {memory_limit_bytes: 100}\n", "storage.memory_limit_bytes: only hybrid and disk modes have a memory limit"},
		{"storage: {dir: x}\n", "storage.dir: only hybrid and disk modes use a directory"},
		{"storage: {mode: hybrid, memory_limit_bytes: 1, wal: true}\n", `storage.wal: unknown key "wal"; want one of mode, memory_limit_bytes, dir`},
		{"storage: hybrid\n", "storage: must be a mapping"},
	}
	for _, tt := range bad {
		_, err := parseConfigFile("c.yaml", []byte(tables+tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}

func TestStorageConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Storage = StorageConfig{Mode: "tape"}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "storage.mode") {
		t.Fatalf("Validate: %v", err)
	}
	cfg.Storage = StorageConfig{Mode: StorageDisk}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("disk mode with the default cache: %v", err)
	}
	if got, want := GoMemoryLimit(cfg), int64(DefaultDiskCacheBytes*5/4+16<<20+64<<20); got != want {
		t.Errorf("GoMemoryLimit = %d, want %d", got, want)
	}
	if got := GoMemoryLimit(DefaultConfig()); got != 0 {
		t.Errorf("GoMemoryLimit in memory mode = %d, want 0", got)
	}
}

// TestSpillDirOverlap: a spill directory that is, or holds, the checkpoint
// or log directory is refused; one inside the checkpoint directory (the
// default place) is fine.
func TestSpillDirOverlap(t *testing.T) {
	root := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		spill, ckpt, wal string
		want             string // "" means accepted
	}{
		{root, root, "", `is or holds checkpoint_dir`},
		{root, filepath.Join(root, "checkpoints"), "", `is or holds checkpoint_dir`},
		{root + "/", filepath.Join(root, "a", "..", "checkpoints"), "", `is or holds checkpoint_dir`},
		{link, filepath.Join(root, "checkpoints"), "", `is or holds checkpoint_dir`},
		{filepath.Join(root, "spill"), filepath.Join(root, "ckpt"), filepath.Join(root, "spill", "wal"), `is or holds wal.dir`},
		{filepath.Join(root, "ckpt", "wal"), filepath.Join(root, "ckpt"), "default", `is or holds wal.dir`}, // the log's default place
		{filepath.Join(root, "ckpt", "spill"), filepath.Join(root, "ckpt"), "", ""},
		{filepath.Join(root, "spill"), filepath.Join(root, "spill2"), "", ""},
	}
	for _, tt := range cases {
		cfg := DefaultConfig()
		cfg.CheckpointDir = tt.ckpt
		cfg.Storage = StorageConfig{Mode: StorageHybrid, MemoryLimitBytes: 1 << 20, Dir: tt.spill}
		switch tt.wal {
		case "":
		case "default":
			cfg.WAL = WALConfig{Fsync: "always"}
		default:
			cfg.WAL = WALConfig{Fsync: "always", Dir: tt.wal}
		}
		err := cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("spill %s, checkpoints %s: %v", tt.spill, tt.ckpt, err)
		case tt.want != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("spill %s, checkpoints %s, log %s: got %v, want %q", tt.spill, tt.ckpt, tt.wal, err, tt.want)
		}
	}
}
