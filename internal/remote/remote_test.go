package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/checkpoint"
	"github.com/reverie-rl/reverie/internal/leakcheck"
	"go.uber.org/goleak"
)

// The S3 driver's HTTP client keeps idle connections, whose goroutines
// outlive Bucket.Close.
func TestMain(m *testing.M) {
	leakcheck.Main(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// S3URLEnv names the environment variable that points the S3 tests at an
// S3-compatible server: a URL such as
// "s3://bucket?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true".
// scripts/minio.sh starts one and prints it.
const S3URLEnv = "REVERIE_TEST_S3_URL"

// GCSURLEnv names the environment variable that points the GCS tests at a
// server speaking Google Cloud Storage's JSON API: a URL such as
// "gs://bucket", with STORAGE_EMULATOR_HOST naming the server.
// scripts/fake-gcs.sh starts one (fake-gcs-server) and prints both.
const GCSURLEnv = "REVERIE_TEST_GCS_URL"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// writeCheckpoint writes a checkpoint of one table holding items items of
// one chunk of chunkBytes bytes each, named after at, under root.
func writeCheckpoint(t testing.TB, root string, at time.Time, items, chunkBytes int) string {
	t.Helper()
	w, err := checkpoint.Create(root, at)
	if err != nil {
		t.Fatal(err)
	}
	w.BeginTable(&reverbpb.PriorityTableCheckpoint{TableName: "replay", MaxSize: 1000})
	payload := make([]byte, chunkBytes)
	for i := range items {
		rand.Read(payload)
		key := uint64(i + 1)
		w.Chunk(&reverbpb.ChunkData{
			ChunkKey:      key,
			SequenceRange: &reverbpb.SequenceRange{EpisodeId: key, End: 0},
			Data:          &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{TensorContent: payload}}},
		})
		w.Item(&reverbpb.PrioritizedItem{
			Key: key, Table: "replay", Priority: 1,
			FlatTrajectory: &reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
				ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: key, Length: 1}},
			}}},
		})
	}
	if err := w.EndTable(); err != nil {
		t.Fatal(err)
	}
	dir, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// withPrefix adds a prefix unique to the test to a bucket URL.
func withPrefix(t *testing.T, raw string) string {
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

func openT(t *testing.T, raw string) *Bucket {
	t.Helper()
	b, err := Open(ctxT(t), raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// suite holds the tests that run against every kind of bucket.
var suite = []struct {
	name string
	f    func(t *testing.T, b *Bucket)
}{
	{"UploadDownload", testUploadDownload},
	{"IncompleteAndCorrupt", testIncompleteAndCorrupt},
	{"UploadCancelled", testUploadCancelled},
	{"Prune", testPrune},
	{"UploadKeep", testUploadKeep},
	{"NewerSnapshotRefused", testNewerSnapshotRefused},
	{"PruneRemovesStrays", testPruneRemovesStrays},
	{"DoneWithoutFile", testDoneWithoutFile},
}

// TestFile runs the suite against file:// buckets in fresh directories.
func TestFile(t *testing.T) {
	for _, tt := range suite {
		t.Run(tt.name, func(t *testing.T) {
			tt.f(t, openT(t, "file://"+filepath.ToSlash(t.TempDir())))
		})
	}
}

// TestS3 runs the suite against an S3-compatible server, each test under
// a fresh prefix of the bucket that S3URLEnv names. It is skipped when the
// variable is not set; scripts/test.sh sets it and fails on a skip.
func TestS3(t *testing.T) {
	raw := os.Getenv(S3URLEnv)
	if raw == "" {
		t.Skipf("%s is not set (scripts/minio.sh starts a server)", S3URLEnv)
	}
	for _, tt := range suite {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, openT(t, withPrefix(t, raw))) })
	}
}

// TestGCS runs the suite against a server speaking GCS's JSON API, each
// test under a fresh prefix of the bucket that GCSURLEnv names. It is
// skipped when the variable is not set, and fails when it is set in a
// binary built without the gs:// driver (-tags gcs); scripts/test-gcs.sh
// sets it, builds with the tag and fails on a skip.
func TestGCS(t *testing.T) {
	raw := os.Getenv(GCSURLEnv)
	if raw == "" {
		t.Skipf("%s is not set (scripts/fake-gcs.sh starts a server)", GCSURLEnv)
	}
	if !gcsLinked {
		t.Fatalf("%s is set, but this test binary has no gs:// driver: build with -tags gcs", GCSURLEnv)
	}
	for _, tt := range suite {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, openT(t, withPrefix(t, raw))) })
	}
}

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)

func testUploadDownload(t *testing.T, b *Bucket) {
	ctx := ctxT(t)
	if _, ok, err := b.Latest(ctx); ok || err != nil {
		t.Fatalf("Latest of an empty bucket: %v %v", ok, err)
	}
	// 20 MB: more than one part of a multipart upload.
	dir := writeCheckpoint(t, t.TempDir(), t0, 5, 4<<20)
	snap, err := b.Upload(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(dir, checkpoint.FileName))
	if snap.Name != filepath.Base(dir) || !snap.Complete || snap.Size != int64(len(want)) || !snap.Time.Equal(t0) {
		t.Fatalf("Upload = %+v", snap)
	}
	latest, ok, err := b.Latest(ctx)
	if err != nil || !ok || latest != snap {
		t.Fatalf("Latest = %+v %v %v, want %+v", latest, ok, err, snap)
	}
	// Uploading again changes nothing.
	if again, err := b.Upload(ctx, dir); err != nil || again != snap {
		t.Fatalf("second Upload = %+v, %v", again, err)
	}

	root := filepath.Join(t.TempDir(), "ckpt")
	got, err := b.Download(ctx, snap.Name, root)
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(root, snap.Name) || !checkpoint.Complete(got) {
		t.Fatalf("Download = %q", got)
	}
	data, _ := os.ReadFile(filepath.Join(got, checkpoint.FileName))
	if !bytes.Equal(data, want) {
		t.Fatal("downloaded file differs from the uploaded one")
	}
}

func testIncompleteAndCorrupt(t *testing.T, b *Bucket) {
	ctx := ctxT(t)
	good := writeCheckpoint(t, t.TempDir(), t0, 3, 100)
	if _, err := b.Upload(ctx, good); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(good, checkpoint.FileName))

	// A newer snapshot whose upload never finished: no DONE.
	partial := checkpoint.DirName(t0.Add(time.Hour))
	if err := b.b.WriteAll(ctx, fileKey(partial), data[:len(data)/2], nil); err != nil {
		t.Fatal(err)
	}
	if latest, _, _ := b.Latest(ctx); latest.Name != filepath.Base(good) {
		t.Fatalf("Latest = %q, want the complete %q", latest.Name, filepath.Base(good))
	}
	root := t.TempDir()
	if _, err := b.Download(ctx, partial, root); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Download of an incomplete snapshot: %v, want ErrNotFound", err)
	}

	// A newer, complete snapshot whose file was damaged in storage.
	bad := checkpoint.DirName(t0.Add(2 * time.Hour))
	damaged := bytes.Clone(data)
	damaged[len(damaged)/2] ^= 0xff
	b.b.WriteAll(ctx, fileKey(bad), damaged, nil)
	b.b.WriteAll(ctx, doneKey(bad), nil, nil)
	latest, _, _ := b.Latest(ctx)
	if latest.Name != bad {
		t.Fatalf("Latest = %q, want %q", latest.Name, bad)
	}
	_, err := b.Download(ctx, bad, root)
	if !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("Download of a damaged snapshot: %v, want ErrCorrupt", err)
	}
	if !strings.Contains(err.Error(), b.String()) || !strings.Contains(err.Error(), fileKey(bad)) {
		t.Fatalf("error does not name the bucket and the object: %v", err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("a failed download left %v", ents)
	}
}

func testUploadCancelled(t *testing.T, b *Bucket) {
	dir := writeCheckpoint(t, t.TempDir(), t0, 3, 1<<20)
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	if _, err := b.Upload(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("Upload with a cancelled context: %v", err)
	}
	snaps, err := b.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if s.Complete {
			t.Fatalf("a cancelled upload left a complete snapshot: %+v", s)
		}
	}
}

func testPrune(t *testing.T, b *Bucket) {
	ctx := ctxT(t)
	local := t.TempDir()
	var names []string
	for i := range 4 {
		dir := writeCheckpoint(t, local, t0.Add(time.Duration(i)*time.Minute), 1, 10)
		if _, err := b.Upload(ctx, dir); err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(dir))
	}
	// Failed uploads, one between old snapshots and one after all.
	oldPartial := checkpoint.DirName(t0.Add(90 * time.Second))
	newPartial := checkpoint.DirName(t0.Add(time.Hour))
	b.b.WriteAll(ctx, fileKey(oldPartial), []byte("x"), nil)
	b.b.WriteAll(ctx, fileKey(newPartial), []byte("x"), nil)
	// An object that is not a snapshot's.
	b.b.WriteAll(ctx, "notes.txt", []byte("x"), nil)

	removed, err := b.Prune(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{names[0], names[1], oldPartial}; strings.Join(removed, " ") != strings.Join(want, " ") {
		t.Fatalf("Prune removed %v, want %v", removed, want)
	}
	snaps, _ := b.List(ctx)
	var left []string
	for _, s := range snaps {
		left = append(left, s.Name)
	}
	if want := []string{names[2], names[3], newPartial}; strings.Join(left, " ") != strings.Join(want, " ") {
		t.Fatalf("after Prune: %v, want %v", left, want)
	}
	if ok, _ := b.b.Exists(ctx, "notes.txt"); !ok {
		t.Fatal("Prune removed an object that is not a snapshot's")
	}
	// Keep 0 means 1.
	if _, err := b.Prune(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if latest, _, _ := b.Latest(ctx); latest.Name != names[3] {
		t.Fatalf("Latest after Prune(0) = %q", latest.Name)
	}
}

func TestCheckURL(t *testing.T) {
	tests := []struct {
		url string
		ok  bool
	}{
		{"file:///srv/snapshots", true},
		{"s3://bucket?region=us-east-1&prefix=trial/", true},
		{"gs://bucket", gcsLinked},
		{"http://example.com/bucket", false},
		{"azblob://container", false},
		{"/srv/snapshots", false},
		{"s3://", false},
		{"::", false},
		{"s3://bucket/", true},
		{"s3://bucket/trial-7", false}, // the driver would ignore the path
		{"s3://bucket/trial-7/?region=us-east-1", false},
		{"file://mnt/snapshots", false}, // the driver would ignore the host
		{"file://./snapshots", true},
		{"file://localhost/srv/snapshots", true},
	}
	for _, tt := range tests {
		err := CheckURL(tt.url)
		if (err == nil) != tt.ok {
			t.Errorf("CheckURL(%q) = %v, want ok %v", tt.url, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadURL) {
			t.Errorf("CheckURL(%q) = %v, does not wrap ErrBadURL", tt.url, err)
		}
	}
}

func TestOpenNamesURL(t *testing.T) {
	_, err := Open(ctxT(t), "file:///nonexistent-dir-for-reverie-test")
	if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "nonexistent-dir-for-reverie-test") {
		t.Fatalf("Open of a missing directory: %v", err)
	}
}

// testUploadKeep checks that UploadKeep leaves the newest keep complete
// snapshots after every upload, with keep 2 (pruned before DONE) and keep
// 1 (pruned after), and that uploading a complete snapshot again prunes.
// Just before each DONE is written with keep 2, the bucket must hold at
// most keep-1 complete snapshots, so that it never holds more than keep.
func testUploadKeep(t *testing.T, b *Bucket) {
	ctx := ctxT(t)
	var keep int
	beforeDone := 0
	testBeforeDone = func(name string) {
		beforeDone++
		snaps, err := b.List(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		n := 0
		for _, s := range snaps {
			if s.Complete {
				n++
			}
		}
		if want := keep - 1; keep >= 2 && n > want {
			t.Errorf("before %s was marked complete, with keep %d, the bucket held %d complete snapshots; want at most %d", name, keep, n, want)
		}
	}
	defer func() { testBeforeDone = nil }()
	local := t.TempDir()
	complete := func() []string {
		snaps, err := b.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range snaps {
			if s.Complete {
				names = append(names, s.Name)
			}
		}
		return names
	}
	var names []string
	for i := range 5 {
		keep = 2
		if i == 4 {
			keep = 1
		}
		dir := writeCheckpoint(t, local, t0.Add(time.Duration(i)*time.Minute), 1, 10)
		names = append(names, filepath.Base(dir))
		snap, removed, pruneErr, err := b.UploadKeep(ctx, dir, keep)
		if err != nil || pruneErr != nil {
			t.Fatalf("upload %d: %v, prune: %v", i, err, pruneErr)
		}
		if snap.Name != names[i] || !snap.Complete {
			t.Fatalf("upload %d returned %+v", i, snap)
		}
		want := names[max(0, len(names)-keep):]
		if got := complete(); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("upload %d (keep %d, removed %v): bucket holds %v, want %v", i, keep, removed, got, want)
		}
	}
	if beforeDone != 5 {
		t.Fatalf("DONE was about to be written %d times in 5 uploads", beforeDone)
	}
	// Already complete: nothing is uploaded, and the prune still runs.
	dir := writeCheckpoint(t, local, t0.Add(10*time.Minute), 1, 10)
	if _, _, _, err := b.UploadKeep(ctx, dir, 2); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.UploadKeep(ctx, dir, 1); err != nil {
		t.Fatal(err)
	}
	if got := complete(); len(got) != 1 || got[0] != filepath.Base(dir) {
		t.Fatalf("after uploading a complete snapshot again with keep 1: %v", got)
	}
}

// TestBadURLHidesCredentials: a URL that does not parse is not quoted
// back, since it may hold a password.
func TestBadURLHidesCredentials(t *testing.T) {
	for _, raw := range []string{
		"s3://AKIAEXAMPLE:se%zzcret@bucket",
		"s3://AKIAEXAMPLE:wJalr/XUtnFEMI@bucket", // a "/" in the secret: taken for a port
	} {
		err := CheckURL(raw)
		if err == nil || strings.Contains(err.Error(), "AKIAEXAMPLE") || strings.Contains(err.Error(), "cret") || strings.Contains(err.Error(), "wJalr") {
			t.Errorf("CheckURL(%q): %v", raw, err)
		}
	}
	// A driver's error quotes the URL it was given; with prefix= it is
	// re-encoded first, so replacing the URL's text did not hide it.
	_, err := Open(ctxT(t), "file://user:secret@localhost"+filepath.ToSlash(t.TempDir())+"?prefix=a/&bogus=1")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open with a bad parameter: %v", err)
	}
}

// TestFileWithoutTempDir: a file:// bucket writes its temporary objects
// beside the final ones, not in the system's temporary directory, which
// may be another file system (the rename into place would fail) or
// missing.
func TestFileWithoutTempDir(t *testing.T) {
	b := openT(t, "file://"+filepath.ToSlash(t.TempDir()))
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	dir := writeCheckpoint(t, t.TempDir(), t0, 1, 10)
	if _, err := b.Upload(ctxT(t), dir); err != nil {
		t.Fatalf("upload with TMPDIR missing: %v", err)
	}
}

// testNewerSnapshotRefused: UploadKeep refuses a checkpoint older than
// the bucket's newest snapshot (another server's, or one made where the
// clock was ahead), which its prune would otherwise remove.
func testNewerSnapshotRefused(t *testing.T, b *Bucket) {
	ctx := ctxT(t)
	local := t.TempDir()
	newer := writeCheckpoint(t, local, t0.Add(time.Hour), 1, 10)
	if _, _, _, err := b.UploadKeep(ctx, newer, 2); err != nil {
		t.Fatal(err)
	}
	older := writeCheckpoint(t, t.TempDir(), t0, 1, 10)
	_, _, _, err := b.UploadKeep(ctx, older, 2)
	if err == nil || !strings.Contains(err.Error(), filepath.Base(newer)) {
		t.Fatalf("upload of a checkpoint older than the bucket's newest: %v", err)
	}
	snaps, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 1 || snaps[0].Name != filepath.Base(newer) || !snaps[0].Complete {
		t.Fatalf("bucket holds %+v, want only %s", snaps, filepath.Base(newer))
	}
}

// testPruneRemovesStrays: a snapshot that Prune removes loses every
// object under its name, not only its file and DONE: an upload cut short
// can leave a temporary object, and a snapshot of nothing else is still
// one to prune.
func testPruneRemovesStrays(t *testing.T, b *Bucket) {
	ctx := ctxT(t)
	stray := checkpoint.DirName(t0) + "/" + checkpoint.FileName + ".1234.tmp"
	if err := b.b.WriteAll(ctx, stray, []byte("partial"), nil); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		dir := writeCheckpoint(t, t.TempDir(), t0.Add(time.Duration(i)*time.Minute), 1, 10)
		if _, _, pruneErr, err := b.UploadKeep(ctx, dir, 1); err != nil || pruneErr != nil {
			t.Fatal(err, pruneErr)
		}
	}
	if ok, err := b.b.Exists(ctx, stray); err != nil || ok {
		t.Fatalf("stray object of a pruned snapshot: exists %v (%v)", ok, err)
	}
}

// testDoneWithoutFile: a DONE whose file is missing, or short, does not
// make Upload skip the snapshot; and UploadKeep's prune before the new
// DONE does not count that snapshot among those it keeps.
func testDoneWithoutFile(t *testing.T, b *Bucket) {
	ctx := ctxT(t)
	dir := writeCheckpoint(t, t.TempDir(), t0, 1, 10)
	if err := b.b.WriteAll(ctx, doneKey(filepath.Base(dir)), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Upload(ctx, dir); err != nil {
		t.Fatal(err)
	}
	s, ok, err := b.Latest(ctx)
	if err != nil || !ok || s.Name != filepath.Base(dir) || s.Size <= 0 {
		t.Fatalf("after the upload: %+v, %v, %v", s, ok, err)
	}

	// Two complete snapshots, then a third whose file is short under
	// its DONE, uploaded again with keep 2: the two newest remain.
	older := writeCheckpoint(t, t.TempDir(), t0.Add(time.Minute), 1, 10)
	if _, err := b.Upload(ctx, older); err != nil {
		t.Fatal(err)
	}
	third := writeCheckpoint(t, t.TempDir(), t0.Add(2*time.Minute), 1, 10)
	name := filepath.Base(third)
	if err := b.b.WriteAll(ctx, fileKey(name), []byte("short"), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.b.WriteAll(ctx, doneKey(name), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, pruneErr, err := b.UploadKeep(ctx, third, 2); err != nil || pruneErr != nil {
		t.Fatal(err, pruneErr)
	}
	snaps, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var complete []string
	for _, s := range snaps {
		if s.Complete {
			complete = append(complete, s.Name)
		}
	}
	if want := []string{filepath.Base(older), name}; !slices.Equal(complete, want) {
		t.Fatalf("complete snapshots %v, want %v", complete, want)
	}
}
