package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/checkpoint"
	"github.com/reverie-rl/reverie/internal/remote"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// s3URLEnv points the S3 tests at an S3-compatible server (see
// scripts/minio.sh and internal/remote's tests).
const s3URLEnv = "REVERIE_TEST_S3_URL"

// gcsURLEnv points the gs:// tests at a server speaking GCS's JSON API
// (see scripts/fake-gcs.sh); the test binary needs -tags gcs.
const gcsURLEnv = "REVERIE_TEST_GCS_URL"

// fileBucket returns the URL of a new file:// bucket and its directory.
func fileBucket(t *testing.T) (string, string) {
	dir := t.TempDir()
	return "file://" + filepath.ToSlash(dir), dir
}

// s3Bucket returns a fresh prefix of the S3 bucket that s3URLEnv names,
// skipping the test if it is not set.
func s3Bucket(t *testing.T) string {
	raw := os.Getenv(s3URLEnv)
	if raw == "" {
		t.Skipf("%s is not set (scripts/minio.sh starts a server)", s3URLEnv)
	}
	return withTestPrefix(t, raw)
}

// gcsBucket returns a fresh prefix of the gs:// bucket that gcsURLEnv
// names, skipping the test if it is not set.
func gcsBucket(t *testing.T) string {
	raw := os.Getenv(gcsURLEnv)
	if raw == "" {
		t.Skipf("%s is not set (scripts/fake-gcs.sh starts a server)", gcsURLEnv)
	}
	return withTestPrefix(t, raw)
}

// withTestPrefix adds a prefix unique to the test to a bucket URL.
func withTestPrefix(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	rand.Read(b[:])
	q := u.Query()
	q.Set("prefix", q.Get("prefix")+strings.ReplaceAll(t.Name(), "/", "_")+"-"+hex.EncodeToString(b[:])+"/")
	u.RawQuery = q.Encode()
	return u.String()
}

func snapConfig(dir, bucket string) server.Config {
	cfg := ckptConfig(dir, ckptTables()...)
	cfg.Snapshots.URL = bucket
	return cfg
}

// listSnapshots lists the bucket.
func listSnapshots(t *testing.T, bucket string) []remote.Snapshot {
	t.Helper()
	b, err := remote.Open(ctxT(t), bucket)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	snaps, err := b.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return snaps
}

func completeNames(snaps []remote.Snapshot) []string {
	var names []string
	for _, s := range snaps {
		if s.Complete {
			names = append(names, s.Name)
		}
	}
	return names
}

func TestSnapshotsFile(t *testing.T) {
	bucket, _ := fileBucket(t)
	testSnapshotRoundTrip(t, bucket)
}

// TestSnapshotsS3 is TestSnapshotsFile against an S3-compatible server.
func TestSnapshotsS3(t *testing.T) {
	testSnapshotRoundTrip(t, s3Bucket(t))
}

func TestSnapshotsGCS(t *testing.T) {
	testSnapshotRoundTrip(t, gcsBucket(t))
}

// testSnapshotRoundTrip checks that Checkpoint uploads before it answers,
// that old snapshots are pruned, and that a server with an empty
// checkpoint directory restores the newest snapshot and serves the same
// tables.
func testSnapshotRoundTrip(t *testing.T, bucket string) {
	cfg := snapConfig(t.TempDir(), bucket)
	cfg.Snapshots.Keep = 2
	a := servertest.Start(t, cfg)
	var paths []string
	for range 3 {
		fill(t, a.Client, 20, 1<<10)
		paths = append(paths, checkpointNow(t, a.Client))
	}
	want := []string{filepath.Base(paths[1]), filepath.Base(paths[2])}
	if got := completeNames(listSnapshots(t, bucket)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("bucket holds %v, want %v", got, want)
	}
	before := serverInfo(t, a.Client)

	fresh := t.TempDir()
	b := servertest.Start(t, snapConfig(fresh, bucket))
	sameInfo(t, serverInfo(t, b.Client), before)
	if got, _ := checkpoint.Latest(fresh); filepath.Base(got) != want[1] {
		t.Fatalf("the new server's checkpoint dir holds %q, want the snapshot %s", got, want[1])
	}
	remoteFile, _ := os.ReadFile(filepath.Join(paths[2], checkpoint.FileName))
	localFile, _ := os.ReadFile(filepath.Join(fresh, want[1], checkpoint.FileName))
	if !bytes.Equal(remoteFile, localFile) {
		t.Fatal("the downloaded checkpoint differs from the one uploaded")
	}
}

// TestScheduledSnapshots runs a schedule and checks that snapshots keep
// arriving, that Keep holds, and (through goleak) that the schedule stops
// with the server.
func TestScheduledSnapshots(t *testing.T) {
	bucket, bucketDir := fileBucket(t)
	cfg := snapConfig(t.TempDir(), bucket)
	cfg.Snapshots.Interval = 50 * time.Millisecond
	cfg.Snapshots.Keep = 2
	a := servertest.Start(t, cfg)
	fill(t, a.Client, 10, 4)

	var seen []string
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("only snapshots %v within 20s at an interval of 50ms", seen)
		}
		names := completeNames(listSnapshots(t, bucket))
		// A listing is not a snapshot of the bucket: it may see the oldest
		// snapshot's DONE before an upload prunes it, and the new one's
		// after. The upload prunes before it writes DONE, so the bucket
		// held more than Keep only if the oldest listed is still there.
		if len(names) > 2 {
			if _, err := os.Stat(filepath.Join(bucketDir, names[0], checkpoint.DoneName)); err == nil {
				t.Fatalf("bucket holds %v; keep is 2", names)
			}
		}
		for _, n := range names {
			if len(seen) == 0 || n > seen[len(seen)-1] {
				seen = append(seen, n)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The scheduled checkpoints are whole.
	b := servertest.Start(t, snapConfig(t.TempDir(), bucket))
	if info := serverInfo(t, b.Client); info[0].GetCurrentSize() != 10 {
		t.Fatalf("restored from a scheduled snapshot: %v", info)
	}
}

// TestRestoreNewerWins checks which of a local checkpoint and a remote
// snapshot a server restores: the newer by name, that is by time.
func TestRestoreNewerWins(t *testing.T) {
	bucket, _ := fileBucket(t)
	local := t.TempDir()
	size := func(s *servertest.Server) int64 { return serverInfo(t, s.Client)[0].GetCurrentSize() }

	// An old local checkpoint of 3 items (no bucket).
	c := servertest.Start(t, ckptConfig(local, ckptTables()...))
	fill(t, c.Client, 3, 4)
	checkpointNow(t, c.Client)
	c.Close() // it holds local locked

	// A newer snapshot of 5 items, from another machine.
	a := servertest.Start(t, snapConfig(t.TempDir(), bucket))
	fill(t, a.Client, 5, 4)
	checkpointNow(t, a.Client)

	// The remote snapshot is newer: it is downloaded and restored.
	b := servertest.Start(t, snapConfig(local, bucket))
	if n := size(b); n != 5 {
		t.Fatalf("restored %d items, want the remote snapshot's 5", n)
	}
	b.Close()

	// A newer local checkpoint, not uploaded, wins over the snapshot.
	d := servertest.Start(t, ckptConfig(local, ckptTables()...))
	fill(t, d.Client, 7, 4)
	checkpointNow(t, d.Client)
	d.Close()
	e := servertest.Start(t, snapConfig(local, bucket))
	if n := size(e); n != 7 {
		t.Fatalf("restored %d items, want the local checkpoint's 7", n)
	}
	// --restore ignores the bucket.
	cfg := snapConfig(t.TempDir(), bucket)
	cfg.RestorePath, _ = checkpoint.Latest(local)
	if n := size(servertest.Start(t, cfg)); n != 7 {
		t.Fatalf("RestorePath restored %d items, want 7", n)
	}
}

// TestRestoreRefusesCorruptSnapshot damages the newest snapshot in the
// bucket: a server that would restore it refuses to start, naming the
// object, and leaves no checkpoint behind.
func TestRestoreRefusesCorruptSnapshot(t *testing.T) {
	bucket, bucketDir := fileBucket(t)
	a := servertest.Start(t, snapConfig(t.TempDir(), bucket))
	fill(t, a.Client, 10, 4)
	path := checkpointNow(t, a.Client)
	name := filepath.Base(path)
	obj := filepath.Join(bucketDir, name, checkpoint.FileName)
	data, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(obj, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	_, err = server.New(snapConfig(fresh, bucket))
	if !errors.Is(err, server.ErrRestore) || !errors.Is(err, server.ErrCheckpointCorrupt) ||
		!strings.Contains(err.Error(), bucket) || !strings.Contains(err.Error(), name+"/"+checkpoint.FileName) {
		t.Fatalf("New = %v; want a corrupt-checkpoint error naming the bucket and the object", err)
	}
	t.Logf("New: %v", err)
	if ents := ckptDirEntries(fresh); len(ents) != 0 {
		t.Fatalf("a failed download left %v in the checkpoint dir", ents)
	}
}

// TestSnapshotUploadFails makes the bucket unusable after start: the
// Checkpoint call answers UNAVAILABLE, saying the local checkpoint was
// written; and a server that cannot reach its bucket at start refuses
// to start.
func TestSnapshotUploadFails(t *testing.T) {
	bucket, bucketDir := fileBucket(t)
	local := t.TempDir()
	a := servertest.Start(t, snapConfig(local, bucket))
	fill(t, a.Client, 3, 4)
	if err := os.RemoveAll(bucketDir); err != nil {
		t.Fatal(err)
	}
	// A file where the bucket's directory was: nothing can be created in it.
	if err := os.WriteFile(bucketDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := a.Client.Checkpoint(ctxT(t), &reverbpb.CheckpointRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "was written") {
		t.Fatalf("Checkpoint with a broken bucket: %v, want UNAVAILABLE saying the checkpoint was written", err)
	}
	t.Logf("Checkpoint: %v", err)
	if got, _ := checkpoint.Latest(local); got == "" {
		t.Fatal("no local checkpoint after a failed upload")
	}

	_, err = server.New(snapConfig(t.TempDir(), bucket))
	if err == nil || !strings.Contains(err.Error(), bucket) {
		t.Fatalf("New with a broken bucket: %v, want an error naming it", err)
	}
	t.Logf("New: %v", err)
}

// TestSnapshotCloseWhileScheduled shuts down a server while a scheduled
// snapshot may be under way, many times over: nothing leaks or hangs.
func TestSnapshotCloseWhileScheduled(t *testing.T) {
	bucket, _ := fileBucket(t)
	for range 5 {
		cfg := snapConfig(t.TempDir(), bucket)
		cfg.Snapshots.Interval = time.Millisecond
		srv, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(lis) }()
		time.Sleep(20 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			t.Fatal(err)
		}
		srv.Close()
	}
}

// TestRestoreSnapshotPrunedBeforeDownload prunes the snapshot a starting
// server chose, between its listing and its download, as another server's
// schedule may: the server looks again and restores the next newest. If
// every snapshot it chooses goes away, it gives up after PullAttempts
// looks with an error naming the bucket.
func TestRestoreSnapshotPrunedBeforeDownload(t *testing.T) {
	bucket, bucketDir := fileBucket(t)
	cfg := snapConfig(t.TempDir(), bucket)
	cfg.Snapshots.Keep = 10
	a := servertest.Start(t, cfg)
	var names []string
	for _, n := range []int{3, 5, 7, 9} { // fill rewrites keys 0..n-1: n items in all
		fill(t, a.Client, n, 4)
		names = append(names, filepath.Base(checkpointNow(t, a.Client)))
	}
	prune := func(name string) {
		if err := os.RemoveAll(filepath.Join(bucketDir, name)); err != nil {
			t.Error(err)
		}
	}

	// The newest is pruned once: the server restores the one before it.
	var offered []string
	restore := server.SetSnapshotDownloadHook(func(name string) {
		offered = append(offered, name)
		if len(offered) == 1 {
			prune(name)
		}
	})
	b := servertest.Start(t, snapConfig(t.TempDir(), bucket))
	restore()
	if want := []string{names[3], names[2]}; strings.Join(offered, " ") != strings.Join(want, " ") {
		t.Fatalf("downloads tried %v, want %v", offered, want)
	}
	if n := serverInfo(t, b.Client)[0].GetCurrentSize(); n != 7 {
		t.Fatalf("restored %d items, want the second newest snapshot's 7", n)
	}

	// Every snapshot chosen is pruned: the server gives up.
	offered = nil
	restore = server.SetSnapshotDownloadHook(func(name string) {
		offered = append(offered, name)
		prune(name)
	})
	defer restore()
	fresh := t.TempDir()
	_, err := server.New(snapConfig(fresh, bucket))
	if len(offered) != server.PullAttempts {
		t.Fatalf("downloads tried %v, want %d tries", offered, server.PullAttempts)
	}
	if err == nil || !errors.Is(err, server.ErrRestore) || !strings.Contains(err.Error(), bucket) {
		t.Fatalf("New = %v; want a restore error naming the bucket", err)
	}
	t.Logf("New: %v", err)
	if ents := ckptDirEntries(fresh); len(ents) != 0 {
		t.Fatalf("a failed download left %v in the checkpoint dir", ents)
	}
}

// TestFailedStartReleasesLocks: a server that fails to start after it
// locked its checkpoint directory (here, at opening the bucket) lets go
// of it, so that a corrected start in the same process is not refused as
// a second server.
func TestFailedStartReleasesLocks(t *testing.T) {
	dir := t.TempDir()
	cfg := snapConfig(dir, "file://"+filepath.ToSlash(filepath.Join(t.TempDir(), "missing")))
	if _, err := server.New(cfg); !errors.Is(err, server.ErrInvalidConfig) || !strings.Contains(err.Error(), "remote_snapshots.url") {
		t.Fatalf("New with a bucket that does not open: %v", err)
	}
	bucket, _ := fileBucket(t)
	servertest.Start(t, snapConfig(dir, bucket))
}
