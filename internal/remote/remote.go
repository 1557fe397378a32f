// Package remote keeps copies of checkpoints, called snapshots, in object
// storage: a bucket opened by URL through gocloud.dev/blob (file://, s3://
// and gs:// are linked in). A snapshot is a checkpoint directory's name
// used as an object prefix:
//
//	<name>/checkpoint.rvck   the checkpoint file, uploaded first
//	<name>/DONE              empty, written once checkpoint.rvck is whole
//
// where <name> is the checkpoint directory's name (its UTC time, see
// checkpoint.DirName), so snapshots sort by name as by time. Only a
// snapshot with DONE counts; an interrupted upload leaves none, and Prune
// removes it later. Files stream in both directions: a snapshot never has
// to fit in memory. Downloads are verified before they are used.
//
// docs/formats.md ("Remote snapshots") describes the layout and how the
// server uses it. A Bucket is safe for concurrent use, but the methods
// assume that one writer at a time uploads and prunes under a prefix.
package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/reverie-rl/reverie/internal/checkpoint"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	// The bucket drivers OpenBucket knows; gs:// is in drivers_gcs.go.
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/s3blob"
)

// Schemes are the URL schemes Open accepts.
var Schemes = []string{"file", "s3", "gs"}

var (
	// ErrBadURL is wrapped by the errors of CheckURL and Open about the
	// URL itself.
	ErrBadURL = errors.New("remote: bad bucket URL")
	// ErrNotFound is returned by Download for a snapshot that has no
	// DONE object: missing, or never finished.
	ErrNotFound = errors.New("remote: no complete snapshot")
)

const contentType = "application/octet-stream"

// Part sizes of multipart uploads. S3 allows at most 10,000 parts, so the
// part grows with the file; each of the uploader's concurrent parts is
// held in memory.
const (
	minPartSize = 8 << 20
	maxParts    = 9000 // under S3's 10,000, with room to spare
)

// Bucket is a bucket of snapshots, opened by Open.
type Bucket struct {
	b   *blob.Bucket
	url string // for messages: the URL with any password hidden
}

// CheckURL reports whether rawURL could name a bucket: it parses and has
// one of Schemes. It does not contact the bucket.
func CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error quotes the URL, with any password in it,
		// and its reason can quote a part of it (a password holding a
		// "/" is taken for a port): with credentials, say nothing more.
		if strings.Contains(rawURL, "@") {
			return fmt.Errorf("%w: the URL does not parse (not shown, as it holds credentials)", ErrBadURL)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%w: the URL does not parse: %v", ErrBadURL, err)
	}
	if u.Scheme == "gs" && !gcsLinked {
		return fmt.Errorf("%w: %s: this binary was built without gs:// support: rebuild with -tags gcs", ErrBadURL, u.Redacted())
	}
	if !slices.Contains(Schemes, u.Scheme) {
		return fmt.Errorf("%w: %s: scheme %q is not supported; want one of %s://", ErrBadURL,
			u.Redacted(), u.Scheme, strings.Join(Schemes, "://, "))
	}
	if u.Host == "" && u.Path == "" && u.Opaque == "" {
		return fmt.Errorf("%w: %s: no bucket or directory", ErrBadURL, u.Redacted())
	}
	switch u.Scheme {
	case "s3", "gs":
		// The drivers open the bucket the host names and ignore the
		// path: servers given s3://b/trial-7 and s3://b/trial-8 would
		// share the bucket's root, and prune each other's snapshots.
		if p := strings.Trim(u.Path, "/"); p != "" {
			return fmt.Errorf("%w: %s: the path %q would be ignored (objects go to the root of bucket %q): name it in the prefix parameter instead, as in %s://%s?prefix=%s/",
				ErrBadURL, u.Redacted(), u.Path, u.Host, u.Scheme, u.Host, p)
		}
	case "file":
		// The driver ignores the host but for "." (a relative path).
		if u.Host != "" && u.Host != "." && u.Host != "localhost" {
			return fmt.Errorf("%w: %s: the host %q would be ignored: want file:///absolute/path or file://./relative/path",
				ErrBadURL, u.Redacted(), u.Host)
		}
	}
	return nil
}

// Open opens the bucket at rawURL, a gocloud.dev/blob URL such as
// "s3://bucket?region=us-east-1&prefix=trial-7/" or
// "file:///srv/snapshots". The "prefix" parameter puts every object under
// a prefix, which should end in "/". Credentials come from the driver's
// usual sources (for S3, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY among
// others). Open does not contact the bucket; the first call that needs it
// does.
func Open(ctx context.Context, rawURL string) (*Bucket, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	u, _ := url.Parse(rawURL)
	shown := u.Redacted()
	if u.Scheme == "file" && !u.Query().Has("no_tmp_dir") {
		// Write each object's temporary file beside it, not in the
		// system's temporary directory: renaming it into place fails
		// across file systems (a shared mount), and a checkpoint-sized
		// file in a tmpfs /tmp takes memory.
		q := u.Query()
		q.Set("no_tmp_dir", "1")
		u.RawQuery = q.Encode()
	}
	// The drivers take credentials from their usual sources, not from the
	// URL's user info, and quote the URL in their errors: drop it.
	u.User = nil
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadURL, shown, err)
	}
	return &Bucket{b: b, url: shown}, nil
}

// String is the bucket's URL with any password hidden.
func (b *Bucket) String() string { return b.url }

// Close releases the bucket.
func (b *Bucket) Close() error { return b.b.Close() }

// Snapshot describes one snapshot in a bucket.
type Snapshot struct {
	// Name is the checkpoint directory name, also the object prefix.
	Name string
	// Time is the time the name stands for.
	Time time.Time
	// Size is the size of its checkpoint.rvck object; -1 if there is none.
	Size int64
	// Complete is true once its DONE object exists.
	Complete bool
}

func fileKey(name string) string { return name + "/" + checkpoint.FileName }
func doneKey(name string) string { return name + "/" + checkpoint.DoneName }

// errorf wraps err with the bucket URL and the object concerned.
func (b *Bucket) errorf(err error, op, key string) error {
	return fmt.Errorf("remote: %s %s object %q: %w", op, b.url, key, err)
}

// listAttempts bounds List's retries of a listing during which an object
// vanished.
const listAttempts = 5

// List returns the snapshots in the bucket, complete or not, oldest first.
// Objects that are not part of a snapshot are ignored.
//
// Another server pruning the bucket may delete objects while they are
// listed, and some drivers (file://, which stats each object it lists)
// then fail the listing with NotFound. List starts over when that happens,
// up to listAttempts times.
func (b *Bucket) List(ctx context.Context) ([]Snapshot, error) {
	for attempt := 1; ; attempt++ {
		snaps, err := b.list(ctx)
		if err == nil || gcerrors.Code(err) != gcerrors.NotFound || attempt == listAttempts || ctx.Err() != nil {
			return snaps, err
		}
	}
}

func (b *Bucket) list(ctx context.Context) ([]Snapshot, error) {
	byName := make(map[string]*Snapshot)
	it := b.b.List(nil)
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("remote: list %s: %w", b.url, err)
		}
		name, base, ok := strings.Cut(obj.Key, "/")
		if !ok {
			continue
		}
		t, ok := checkpoint.ParseDirName(name)
		if !ok {
			continue
		}
		s := byName[name]
		if s == nil {
			s = &Snapshot{Name: name, Time: t, Size: -1}
			byName[name] = s
		}
		switch base {
		case checkpoint.FileName:
			s.Size = obj.Size
		case checkpoint.DoneName:
			s.Complete = true
		}
		// Anything else (an upload's temporary object) makes the name
		// an incomplete snapshot, which Prune removes in its turn.
	}
	snaps := make([]Snapshot, 0, len(byName))
	for _, s := range byName {
		if s.Size < 0 {
			s.Complete = false // DONE without its file
		}
		snaps = append(snaps, *s)
	}
	slices.SortFunc(snaps, func(a, b Snapshot) int { return strings.Compare(a.Name, b.Name) })
	return snaps, nil
}

// Latest returns the newest complete snapshot, and false if there is none.
func (b *Bucket) Latest(ctx context.Context) (Snapshot, bool, error) {
	snaps, err := b.List(ctx)
	if err != nil {
		return Snapshot{}, false, err
	}
	for _, s := range slices.Backward(snaps) {
		if s.Complete {
			return s, true, nil
		}
	}
	return Snapshot{}, false, nil
}

// Upload copies the complete checkpoint directory dir to the bucket as the
// snapshot of the same name, and returns it. It streams checkpoint.rvck,
// checks the size of the object written, and then writes DONE. A snapshot
// of that name that is already complete is left as it is. If ctx ends or
// the upload fails, the partial upload is abandoned and no DONE is
// written.
func (b *Bucket) Upload(ctx context.Context, dir string) (Snapshot, error) {
	return b.upload(ctx, dir, nil)
}

// UploadKeep is Upload followed by Prune(keep), ordered so that the bucket
// never holds more than keep complete snapshots: with keep of 2 or more,
// older snapshots are pruned down to keep-1 after the file is stored and
// checked, and before DONE is written; with keep 1 (one complete snapshot
// must always remain), after DONE, as Prune alone. A prune failure does
// not fail the upload: it is returned as pruneErr, with the names removed
// before it.
func (b *Bucket) UploadKeep(ctx context.Context, dir string, keep int) (snap Snapshot, removed []string, pruneErr, err error) {
	// A newer snapshot in the bucket (another server's under the same
	// prefix, or one made where the clock was ahead) would make the
	// prune remove this one, and a restore take the other: refuse.
	name := filepath.Base(dir)
	latest, ok, err := b.Latest(ctx)
	if err != nil {
		return Snapshot{}, nil, nil, err
	}
	if ok && latest.Name > name {
		return Snapshot{}, nil, nil, fmt.Errorf("remote: upload %s to %s: the bucket holds a newer snapshot, %s "+
			"(another server uses this bucket and prefix, or a clock was ahead); not uploaded, since pruning "+
			"would remove this one and a restore would take the newer", name, b.url, latest.Name)
	}
	pruned := false
	if keep >= 2 {
		snap, err = b.upload(ctx, dir, func() {
			pruned = true
			removed, pruneErr = b.Prune(ctx, keep-1)
		})
	} else {
		snap, err = b.upload(ctx, dir, nil)
	}
	if err != nil {
		return snap, removed, pruneErr, err
	}
	if !pruned { // already complete, or keep 1
		removed, pruneErr = b.Prune(ctx, keep)
	}
	return snap, removed, pruneErr, nil
}

// upload is Upload, calling beforeDone (if not nil) once the file is stored
// and checked, just before DONE is written.
func (b *Bucket) upload(ctx context.Context, dir string, beforeDone func()) (Snapshot, error) {
	name := filepath.Base(dir)
	t, ok := checkpoint.ParseDirName(name)
	if !ok {
		return Snapshot{}, fmt.Errorf("remote: upload %s: not a checkpoint directory name", dir)
	}
	if !checkpoint.Complete(dir) {
		return Snapshot{}, fmt.Errorf("remote: upload %s: not a complete checkpoint", dir)
	}
	f, err := os.Open(filepath.Join(dir, checkpoint.FileName))
	if err != nil {
		return Snapshot{}, fmt.Errorf("remote: upload: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Snapshot{}, fmt.Errorf("remote: upload: %w", err)
	}
	snap := Snapshot{Name: name, Time: t, Size: st.Size(), Complete: true}

	done, err := b.b.Exists(ctx, doneKey(name))
	if err != nil {
		return Snapshot{}, b.errorf(err, "check", doneKey(name))
	}
	if done {
		// Complete already, unless its file is missing or short.
		if attrs, err := b.b.Attributes(ctx, fileKey(name)); err == nil && attrs.Size == st.Size() {
			return snap, nil
		}
		// Its DONE goes first: until the file is whole again the
		// snapshot is not complete, and a prune before the new DONE
		// must not count it among those it keeps.
		if err := b.b.Delete(ctx, doneKey(name)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return Snapshot{}, b.errorf(err, "delete", doneKey(name))
		}
	}

	key := fileKey(name)
	if err := b.put(ctx, key, f, st.Size()); err != nil {
		return Snapshot{}, err
	}
	attrs, err := b.b.Attributes(ctx, key)
	if err != nil {
		return Snapshot{}, b.errorf(err, "check", key)
	}
	if attrs.Size != st.Size() {
		return Snapshot{}, b.errorf(fmt.Errorf("%d bytes stored, %d sent", attrs.Size, st.Size()), "check", key)
	}
	if beforeDone != nil {
		beforeDone()
	}
	if f := testBeforeDone; f != nil {
		f(name)
	}
	// DONE last: until it exists, readers ignore the snapshot.
	if err := b.b.WriteAll(ctx, doneKey(name), nil, &blob.WriterOptions{ContentType: contentType}); err != nil {
		return Snapshot{}, b.errorf(err, "write", doneKey(name))
	}
	return snap, nil
}

// testBeforeDone, when set, is called with the snapshot's name just
// before its DONE is written: tests look at the bucket then.
var testBeforeDone func(name string)

// put streams r (size bytes) to key. A failed write is aborted by
// cancelling the writer's context, so that the object is not created.
func (b *Bucket) put(ctx context.Context, key string, r io.Reader, size int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	part := max(int64(minPartSize), (size+maxParts-1)/maxParts)
	w, err := b.b.NewWriter(wctx, key, &blob.WriterOptions{ContentType: contentType, BufferSize: int(part)})
	if err != nil {
		return b.errorf(err, "write", key)
	}
	if _, err := io.Copy(w, r); err != nil {
		cancel()
		w.Close()
		return b.errorf(err, "write", key)
	}
	if err := w.Close(); err != nil {
		return b.errorf(err, "write", key)
	}
	return nil
}

// Download copies the complete snapshot name into root as a checkpoint
// directory of the same name and returns its path. The file is streamed to
// disk and verified (checkpoint.Import) before the directory is marked
// complete: a damaged snapshot fails with an error wrapping
// checkpoint.ErrCorrupt and leaves nothing behind. A snapshot without DONE
// fails with ErrNotFound.
func (b *Bucket) Download(ctx context.Context, name, root string) (string, error) {
	if _, ok := checkpoint.ParseDirName(name); !ok {
		return "", fmt.Errorf("remote: download %q: not a snapshot name", name)
	}
	done, err := b.b.Exists(ctx, doneKey(name))
	if err != nil {
		return "", b.errorf(err, "check", doneKey(name))
	}
	if !done {
		return "", fmt.Errorf("%w: %s has no object %q", ErrNotFound, b.url, doneKey(name))
	}
	key := fileKey(name)
	r, err := b.b.NewReader(ctx, key, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return "", fmt.Errorf("%w: %s has %q but no object %q", ErrNotFound, b.url, doneKey(name), key)
		}
		return "", b.errorf(err, "read", key)
	}
	defer r.Close()
	dir, _, err := checkpoint.Import(root, name, r)
	if err != nil {
		return "", b.errorf(err, "download", key)
	}
	return dir, nil
}

// Prune keeps the newest keep complete snapshots (at least one) and
// removes every snapshot older than the oldest of them, complete or not.
// Incomplete snapshots newer than that are left alone: they may be uploads
// under way. Each snapshot loses its DONE first, so that a prune cut short
// never leaves a snapshot that looks complete but is not. Prune returns
// the names it removed.
func (b *Bucket) Prune(ctx context.Context, keep int) ([]string, error) {
	keep = max(keep, 1)
	snaps, err := b.List(ctx)
	if err != nil {
		return nil, err
	}
	var complete []string
	for _, s := range snaps {
		if s.Complete {
			complete = append(complete, s.Name)
		}
	}
	if len(complete) == 0 {
		return nil, nil
	}
	oldestKept := complete[max(0, len(complete)-keep)]
	var removed []string
	for _, s := range snaps {
		if s.Name >= oldestKept {
			break
		}
		if err := b.remove(ctx, s.Name); err != nil {
			return removed, err
		}
		removed = append(removed, s.Name)
	}
	return removed, nil
}

// remove deletes every object of the snapshot name: DONE first, then the
// rest (its file, and any temporary object an upload left).
func (b *Bucket) remove(ctx context.Context, name string) error {
	keys := []string{doneKey(name)}
	it := b.b.List(&blob.ListOptions{Prefix: name + "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return b.errorf(err, "list", name+"/")
		}
		if obj.Key != doneKey(name) {
			keys = append(keys, obj.Key)
		}
	}
	for _, key := range keys {
		if err := b.b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return b.errorf(err, "delete", key)
		}
	}
	return nil
}
