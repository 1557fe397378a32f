package server

// The remote_snapshots block of reverie's YAML config (docs/config.md).

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// yamlRemoteSnapshots decodes remote_snapshots into cfg.Snapshots:
//
//	remote_snapshots:
//	  url: s3://bucket?region=us-east-1&prefix=trial-7/
//	  interval: 10m
//	  keep: 2
//	  timeout: 1h
//
// Config.Validate checks the values together.
// MinSnapshotSetting is the least snapshot interval and upload timeout a
// config file or a serve flag may give.
const MinSnapshotSetting = time.Second

func (p *cfgParser) yamlRemoteSnapshots(n *yaml.Node, cfg *Config) error {
	const path = "remote_snapshots"
	if yamlAbsent(n) {
		return nil
	}
	m, _, err := p.ymapping(n, path, "url", "interval", "keep", "timeout")
	if err != nil {
		return err
	}
	sc := &cfg.Snapshots
	if v, ok := m["url"]; ok {
		if sc.URL, err = p.ystring(v, path+".url"); err != nil {
			return err
		}
	}
	if v, ok := m["interval"]; ok {
		if sc.Interval, err = p.yduration(v, path+".interval"); err != nil {
			return err
		}
		// Each snapshot is a checkpoint of every table and an upload of
		// it: one more often than every second is a mistake (a unit left
		// out, say), not a schedule. (A Config built in Go may set any.)
		if sc.Interval > 0 && sc.Interval < MinSnapshotSetting {
			return p.yerrf(path+".interval", v, "must be 0 (no schedule) or at least %v, got %v", MinSnapshotSetting, sc.Interval)
		}
	}
	if v, ok := m["keep"]; ok {
		keep, err := p.yint(v, path+".keep")
		if err != nil {
			return err
		}
		if keep < 0 || keep > 1<<20 {
			return p.yerrf(path+".keep", v, "must be in [0, %d], got %d", 1<<20, keep)
		}
		sc.Keep = int(keep)
	}
	if v, ok := m["timeout"]; ok {
		if sc.Timeout, err = p.yduration(v, path+".timeout"); err != nil {
			return err
		}
		if sc.Timeout > 0 && sc.Timeout < MinSnapshotSetting {
			return p.yerrf(path+".timeout", v, "must be 0 (the default) or at least %v, got %v", MinSnapshotSetting, sc.Timeout)
		}
	}
	return nil
}

// yduration decodes a duration written as Go writes them: "90s", "10m",
// "1h30m". Zero may be written 0.
func (p *cfgParser) yduration(n *yaml.Node, path string) (time.Duration, error) {
	n = yamlResolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		if n.Value == "0" {
			return 0, nil
		}
		if d, err := time.ParseDuration(n.Value); err == nil {
			if d < 0 {
				return 0, p.yerrf(path, n, "must be >= 0, got %s", n.Value)
			}
			return d, nil
		}
	}
	return 0, p.yerrf(path, n, `must be a duration such as "90s", "10m" or "1h", got %s`, yamlDescribe(n))
}
