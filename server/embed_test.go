package server_test

import (
	"sync"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/selector"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
)

// newestFirst is a custom selector as a Go user would write one: it wraps
// a built-in and reports its own spec.
type newestFirst struct{ selector.Selector }

func (newestFirst) Spec() selector.Spec {
	return selector.Spec{Kind: selector.KindCustom, Name: "newest"}
}

// recorder is a table extension that records the hooks it saw.
type recorder struct {
	server.NoopExtension
	mu     sync.Mutex
	events []string
}

func (r *recorder) OnInsert(it *server.TableItem) { r.add("insert") }
func (r *recorder) OnSample(it *server.TableItem) { r.add("sample") }
func (r *recorder) OnDelete(it *server.TableItem) { r.add("delete") }
func (r *recorder) OnReset()                      { r.add("reset") }
func (r *recorder) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func TestCustomSelectorAndExtension(t *testing.T) {
	rec := &recorder{}
	cfg := testConfig(server.TableConfig{
		Name:            "custom",
		Sampler:         selector.Spec{Kind: selector.KindCustom, Name: "newest"},
		Remover:         selector.Spec{Kind: selector.KindFIFO},
		MaxSize:         10,
		MaxTimesSampled: 1,
		RateLimiter:     server.MinSize(1),
		Extensions:      []server.TableExtension{rec},
	})
	cfg.Selectors = map[string]selector.Factory{
		"newest": func(uint64) selector.Selector { return newestFirst{selector.NewLIFO()} },
	}
	s := servertest.Start(t, cfg)
	ctx := ctxT(t)
	var items []*reverbpb.PrioritizedItem
	for k := uint64(1); k <= 3; k++ {
		items = append(items, item(k, "custom", 1, 1, 0, 1))
	}
	if _, err := insertAll(ctx, s.Client, &reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)}, Items: items}); err != nil {
		t.Fatal(err)
	}
	entries, err := sampleN(ctx, s.Client, "custom", 3, -1)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if got, want := e.GetInfo().GetItem().GetKey(), uint64(3-i); got != want {
			t.Fatalf("sample %d: key %d, want %d (newest first)", i, got, want)
		}
	}
	info, err := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if opts := info.GetTableInfo()[0].GetSamplerOptions(); opts.GetDistribution() != nil || opts.GetIsDeterministic() {
		t.Fatalf("a custom selector has no Reverb description; got %v", opts)
	}
	if _, err := s.Client.Reset(ctx, &reverbpb.ResetRequest{Table: "custom"}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{"insert", "insert", "insert", "sample", "delete", "sample", "delete", "sample", "delete", "reset"}
	if len(rec.events) != len(want) {
		t.Fatalf("extension saw %v, want %v", rec.events, want)
	}
	for i := range want {
		if rec.events[i] != want[i] {
			t.Fatalf("extension saw %v, want %v", rec.events, want)
		}
	}
	stats, ok := s.TableStats("custom")
	if !ok || stats.Inserts != 3 || stats.Samples != 3 || stats.Deletes != 3 || stats.Resets != 1 || stats.SampledAtDelete != 3 {
		t.Fatalf("table stats %+v", stats)
	}
}
