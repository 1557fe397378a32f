package server

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/selector"
)

// readmeTextproto is the reverb_server example of Reverb's README.
const readmeTextproto = `port: 8000
tables: {
  table_name: "my_table"
  sampler: {
    fifo: true
  }
  remover: {
    fifo: true
  }
  max_size: 200 max_times_sampled: 5
  rate_limiter: {
    min_size_to_sample: 1
    samples_per_insert: 1
    min_diff: -1.7976931348623157e308
    max_diff: 1.7976931348623157e308
  }
}
`

// readmeYAML is readmeTextproto in reverie's YAML.
const readmeYAML = `port: 8000
tables:
  - name: my_table
    sampler: fifo
    remover: fifo
    max_size: 200
    max_times_sampled: 5
    rate_limiter: {min_size: 1}
`

var (
	fifoSpec    = selector.Spec{Kind: selector.KindFIFO}
	lifoSpec    = selector.Spec{Kind: selector.KindLIFO}
	uniformSpec = selector.Spec{Kind: selector.KindUniform}
)

func readmeConfig() Config {
	return Config{
		Port: 8000,
		Tables: []TableConfig{{
			Name:            "my_table",
			Sampler:         fifoSpec,
			Remover:         fifoSpec,
			MaxSize:         200,
			MaxTimesSampled: 5,
			RateLimiter: RateLimiter{
				SamplesPerInsert: 1,
				MinSizeToSample:  1,
				MinDiff:          -math.MaxFloat64,
				MaxDiff:          math.MaxFloat64,
			},
		}},
	}
}

// writeConfig writes content to a file called name in a new temporary
// directory and returns its path.
func writeConfig(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkConfig compares configs, signatures with proto.Equal.
func checkConfig(t *testing.T, got, want Config) {
	t.Helper()
	if len(got.Tables) != len(want.Tables) {
		t.Fatalf("got %d tables, want %d: %+v", len(got.Tables), len(want.Tables), got.Tables)
	}
	for i := range got.Tables {
		g, w := got.Tables[i], want.Tables[i]
		if !proto.Equal(g.Signature, w.Signature) {
			t.Errorf("tables[%d].Signature:\ngot  %v\nwant %v", i, prototext.Format(g.Signature), prototext.Format(w.Signature))
		}
		g.Signature, w.Signature = nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Errorf("tables[%d]:\ngot  %+v\nwant %+v", i, g, w)
		}
	}
	got.Tables, want.Tables = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config:\ngot  %+v\nwant %+v", got, want)
	}
}

func tensorSpec(dtype tensorflowpb.DataType, name string, dims ...int64) *tensorflowpb.StructuredValue {
	shape := &tensorflowpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &tensorflowpb.TensorShapeProto_Dim{Size: d})
	}
	return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_TensorSpecValue{
		TensorSpecValue: &tensorflowpb.TensorSpecProto{Name: name, Dtype: dtype, Shape: shape},
	}}
}

func unknownRankSpec(dtype tensorflowpb.DataType) *tensorflowpb.StructuredValue {
	return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_TensorSpecValue{
		TensorSpecValue: &tensorflowpb.TensorSpecProto{Dtype: dtype, Shape: &tensorflowpb.TensorShapeProto{UnknownRank: true}},
	}}
}

func dictValue(fields map[string]*tensorflowpb.StructuredValue) *tensorflowpb.StructuredValue {
	return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_DictValue{DictValue: &tensorflowpb.DictValue{Fields: fields}}}
}

func listValue(vs ...*tensorflowpb.StructuredValue) *tensorflowpb.StructuredValue {
	return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_ListValue{ListValue: &tensorflowpb.ListValue{Values: vs}}}
}

func tupleValue(vs ...*tensorflowpb.StructuredValue) *tensorflowpb.StructuredValue {
	return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_TupleValue{TupleValue: &tensorflowpb.TupleValue{Values: vs}}}
}

// nestedSignature is the signature of sigYAML and sigTextproto.
func nestedSignature() *tensorflowpb.StructuredValue {
	return dictValue(map[string]*tensorflowpb.StructuredValue{
		"obs":    tensorSpec(tensorflowpb.DataType_DT_FLOAT, "observation", -1, 3),
		"action": tensorSpec(tensorflowpb.DataType_DT_INT64, ""),
		"extras": listValue(
			tensorSpec(tensorflowpb.DataType_DT_BOOL, "", -1),
			tupleValue(
				tensorSpec(tensorflowpb.DataType_DT_UINT8, "", 84, 84, 3),
				unknownRankSpec(tensorflowpb.DataType_DT_STRING),
			),
		),
		"nested": dictValue(map[string]*tensorflowpb.StructuredValue{
			"x y": unknownRankSpec(tensorflowpb.DataType_DT_HALF),
		}),
	})
}

const sigYAML = `tables:
  - name: t
    queue: 10
    signature:
      obs: {dtype: float32, shape: [null, 3], name: observation}
      action: {dtype: int64, shape: []}
      extras:
        - {dtype: bool, shape: [-1]}
        - tuple:
            - {dtype: uint8, shape: [84, 84, 3]}
            - {dtype: string}
      nested:
        "x y": {dtype: float16, shape: null}
`

const sigTextproto = `tables {
  table_name: "t"
  sampler { fifo: true }
  remover { fifo: true }
  max_size: 10
  max_times_sampled: 1
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: 0 max_diff: 10 }
  signature { dict_value { fields {
    key: "obs"
    value { tensor_spec_value { name: "observation" dtype: DT_FLOAT shape { dim { size: -1 } dim { size: 3 } } } }
  } fields {
    key: "action"
    value { tensor_spec_value { dtype: DT_INT64 shape {} } }
  } fields {
    key: "extras"
    value { list_value {
      values { tensor_spec_value { dtype: DT_BOOL shape { dim { size: -1 } } } }
      values { tuple_value {
        values { tensor_spec_value { dtype: DT_UINT8 shape { dim { size: 84 } dim { size: 84 } dim { size: 3 } } } }
        values { tensor_spec_value { dtype: DT_STRING shape { unknown_rank: true } } }
      } }
    } }
  } fields {
    key: "nested"
    value { dict_value { fields {
      key: "x y"
      value { tensor_spec_value { dtype: DT_HALF shape { unknown_rank: true } } }
    } } }
  } } }
}
`

func TestLoadConfigFileGood(t *testing.T) {
	withPort := func(c Config, port int) Config { c.Port = port; return c }
	sigCfg := Config{Port: DefaultPort, Tables: []TableConfig{QueueTable("t", 10)}}
	sigCfg.Tables[0].Signature = nestedSignature()

	tests := []struct {
		name, file, content string
		want                Config
	}{
		{"readme textproto", "reverb.textproto", readmeTextproto, readmeConfig()},
		{"readme pbtxt", "reverb.pbtxt", readmeTextproto, readmeConfig()},
		{"readme yaml", "reverie.yaml", readmeYAML, readmeConfig()},
		{"readme yml", "reverie.yml", readmeYAML, readmeConfig()},
		{"upper-case extension", "REVERB.TEXTPROTO", readmeTextproto, readmeConfig()},
		{"textproto without port", "a.textproto", strings.Replace(readmeTextproto, "port: 8000", "", 1), readmeConfig()},
		{"textproto port 0", "a.textproto", strings.Replace(readmeTextproto, "port: 8000", "port: 0", 1), withPort(readmeConfig(), 0)},
		{"textproto port 1234", "a.textproto", strings.Replace(readmeTextproto, "port: 8000", "port: 1234", 1), withPort(readmeConfig(), 1234)},
		{"yaml without port", "a.yaml", strings.Replace(readmeYAML, "port: 8000", "", 1), readmeConfig()},
		{"yaml wal", "a.yaml", readmeYAML + "checkpoint_dir: /srv/ck\ncheckpoint_write_rate: -1\nwal: {fsync: interval, interval: 250ms, dir: /srv/wal, checkpoint_after_bytes: 1000}\n", func() Config {
			c := readmeConfig()
			c.CheckpointDir = "/srv/ck"
			c.CheckpointWriteRate = -1
			c.WAL = WALConfig{Fsync: "interval", Interval: 250 * time.Millisecond, Dir: "/srv/wal", CheckpointAfterBytes: 1000}
			return c
		}()},
		{"yaml port 0", "a.yaml", strings.Replace(readmeYAML, "port: 8000", "port: 0", 1), withPort(readmeConfig(), 0)},
		{"textproto infinite diffs", "a.textproto", strings.NewReplacer("-1.7976931348623157e308", "-inf", "1.7976931348623157e308", "inf").Replace(readmeTextproto), readmeConfig()},
		{"yaml generic infinite diffs", "a.yaml", strings.Replace(readmeYAML, "{min_size: 1}",
			"{samples_per_insert: 1, min_size_to_sample: 1, min_diff: -.inf, max_diff: .inf}", 1), readmeConfig()},
		{"yaml generic DBL_MAX diffs", "a.yaml", strings.Replace(readmeYAML, "{min_size: 1}",
			"{samples_per_insert: 1, min_size_to_sample: 1, min_diff: -1.7976931348623157e308, max_diff: 1.7976931348623157e308}", 1), readmeConfig()},
		{"textproto ignored fields", "a.textproto", `
port: 8000
tables {
  table_name: "my_table"
  sampler { fifo: true is_deterministic: false }
  remover { fifo: true is_deterministic: true }
  max_size: 200 max_times_sampled: 5
  num_deleted_episodes: 7
  num_unique_samples: 9
  deprecated_items { key: 1 table: "x" priority: 2 }
  rate_limiter {
    min_size_to_sample: 1 samples_per_insert: 1
    min_diff: -1.7976931348623157e308 max_diff: 1.7976931348623157e308
    sample_count: 10 insert_count: 20 delete_count: 30
  }
}`, readmeConfig()},
		{"textproto all selectors", "a.textproto", `
tables { table_name: "a" sampler { uniform: true } remover { lifo: true } max_size: 10
         rate_limiter { samples_per_insert: 2.5 min_size_to_sample: 3 min_diff: -10 max_diff: 10 } }
tables { table_name: "b" sampler { prioritized { priority_exponent: 0.8 } } remover { heap { min_heap: true } } max_size: 10
         max_times_sampled: -1 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: 0 max_diff: 0 } }
tables { table_name: "c" sampler { heap { min_heap: false } } remover { heap {} } max_size: 10
         rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }
tables { table_name: "d" sampler { prioritized {} } remover { fifo: true } max_size: 1
         rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }
`, Config{Port: DefaultPort, Tables: []TableConfig{
			{Name: "a", Sampler: uniformSpec, Remover: lifoSpec, MaxSize: 10, RateLimiter: RateLimiter{SamplesPerInsert: 2.5, MinSizeToSample: 3, MinDiff: -10, MaxDiff: 10}},
			{Name: "b", Sampler: selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 0.8}, Remover: selector.Spec{Kind: selector.KindMinHeap},
				MaxSize: 10, MaxTimesSampled: -1, RateLimiter: RateLimiter{SamplesPerInsert: 1, MinSizeToSample: 1}},
			{Name: "c", Sampler: selector.Spec{Kind: selector.KindMaxHeap}, Remover: selector.Spec{Kind: selector.KindMaxHeap},
				MaxSize: 10, RateLimiter: RateLimiter{SamplesPerInsert: 1, MinSizeToSample: 1}},
			{Name: "d", Sampler: selector.Spec{Kind: selector.KindPrioritized}, Remover: fifoSpec, MaxSize: 1,
				RateLimiter: RateLimiter{SamplesPerInsert: 1, MinSizeToSample: 1}},
		}}},
		{"yaml all forms", "a.yaml", `
port: 9000
listen: "unix:///tmp/reverie.sock"
local_listen: "unix:///tmp/reverie-local.sock"
checkpoint_dir: /tmp/ckpt
tables:
  - name: a
    sampler: uniform
    remover: lifo
    max_size: 10
    rate_limiter: {samples_per_insert: 2.5, min_size_to_sample: 3, min_diff: -10, max_diff: 10}
  - name: b
    sampler: {prioritized: {priority_exponent: 0.8}}
    remover: min_heap
    max_size: 1e3
    max_times_sampled: 2
    rate_limiter:
      sample_to_insert_ratio: {samples_per_insert: 4, min_size_to_sample: 1000, error_buffer: 100}
  - name: c
    sampler: max_heap
    remover: fifo
    max_size: 1_000_000
    rate_limiter:
      sample_to_insert_ratio: {samples_per_insert: 4, min_size_to_sample: 1000, min_diff: 3000, max_diff: 5000}
  - name: d
    sampler: fifo
    remover: fifo
    max_size: 5
    rate_limiter: {queue: 5}
  - name: e
    sampler: lifo
    remover: lifo
    max_size: 5
    rate_limiter: {stack: 5}
  - name: f
    sampler: uniform
    remover: fifo
    max_size: 5
    rate_limiter: {sample_to_insert_ratio: {samples_per_insert: 0.5, min_size_to_sample: 2, error_buffer: [-1, 1.5]}}
  - name: q
    queue: 100
  - name: s
    stack: 7
  - {name: g, sampler: uniform, remover: fifo, max_size: 5, rate_limiter: {min_size: 3},
     max_times_sampled: 0, signature: ~}
`, Config{Port: 9000, Listen: "unix:///tmp/reverie.sock", LocalListen: "unix:///tmp/reverie-local.sock", CheckpointDir: "/tmp/ckpt", Tables: []TableConfig{
			{Name: "a", Sampler: uniformSpec, Remover: lifoSpec, MaxSize: 10, RateLimiter: RateLimiter{SamplesPerInsert: 2.5, MinSizeToSample: 3, MinDiff: -10, MaxDiff: 10}},
			{Name: "b", Sampler: selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 0.8}, Remover: selector.Spec{Kind: selector.KindMinHeap},
				MaxSize: 1000, MaxTimesSampled: 2, RateLimiter: SampleToInsertRatio(4, 1000, 100)},
			{Name: "c", Sampler: selector.Spec{Kind: selector.KindMaxHeap}, Remover: fifoSpec, MaxSize: 1_000_000,
				RateLimiter: RateLimiter{SamplesPerInsert: 4, MinSizeToSample: 1000, MinDiff: 3000, MaxDiff: 5000}},
			{Name: "d", Sampler: fifoSpec, Remover: fifoSpec, MaxSize: 5, RateLimiter: Queue(5)},
			{Name: "e", Sampler: lifoSpec, Remover: lifoSpec, MaxSize: 5, RateLimiter: Stack(5)},
			{Name: "f", Sampler: uniformSpec, Remover: fifoSpec, MaxSize: 5, RateLimiter: RateLimiter{SamplesPerInsert: 0.5, MinSizeToSample: 2, MinDiff: -1, MaxDiff: 1.5}},
			QueueTable("q", 100),
			StackTable("s", 7),
			{Name: "g", Sampler: uniformSpec, Remover: fifoSpec, MaxSize: 5, RateLimiter: MinSize(3)},
		}}},
		{"yaml aliases", "a.yaml", `
tables:
  - name: my_table
    sampler: &f fifo
    remover: *f
    max_size: &n 200
    max_times_sampled: 5
    rate_limiter: {min_size: 1}
`, readmeConfig()},
		{"yaml merge key", "a.yaml", `
tables:
  - &base {name: a, sampler: uniform, remover: fifo, max_size: 10, rate_limiter: {min_size: 1}}
  - <<: *base
    name: b
    max_size: 20
`, Config{Port: DefaultPort, Tables: []TableConfig{
			{Name: "a", Sampler: uniformSpec, Remover: fifoSpec, MaxSize: 10, RateLimiter: MinSize(1)},
			{Name: "b", Sampler: uniformSpec, Remover: fifoSpec, MaxSize: 20, RateLimiter: MinSize(1)},
		}}},
		{"yaml infinite error_buffer and listen", "a.yaml", `
listen: "[::1]:0"
tables:
  - name: my_table
    sampler: fifo
    remover: fifo
    max_size: 200
    max_times_sampled: 5
    rate_limiter: {sample_to_insert_ratio: {samples_per_insert: 1, min_size_to_sample: 1, error_buffer: .inf}}
`, func() Config { c := readmeConfig(); c.Listen = "[::1]:0"; return c }()},
		{"textproto named tuple and bounded spec", "a.textproto", `
tables { table_name: "t" sampler { fifo: true } remover { fifo: true } max_size: 10 max_times_sampled: 1
  rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: 0 max_diff: 10 }
  signature { named_tuple_value { name: "Step" values { key: "a" value { bounded_tensor_spec_value { dtype: DT_INT32 shape {} } } }
                                              values { key: "b" value { list_value {} } } } }
}`, Config{Port: DefaultPort, Tables: []TableConfig{func() TableConfig {
			tc := QueueTable("t", 10)
			tc.Signature = &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_NamedTupleValue{NamedTupleValue: &tensorflowpb.NamedTupleValue{
				Name: "Step",
				Values: []*tensorflowpb.PairValue{
					{Key: "a", Value: &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_BoundedTensorSpecValue{
						BoundedTensorSpecValue: &tensorflowpb.BoundedTensorSpecProto{Dtype: tensorflowpb.DataType_DT_INT32, Shape: &tensorflowpb.TensorShapeProto{}},
					}}},
					{Key: "b", Value: listValue()},
				},
			}}}
			return tc
		}()}}},
		{"yaml empty signature dict", "a.yaml", "tables: [{name: t, queue: 10, signature: {}}]",
			Config{Port: DefaultPort, Tables: []TableConfig{func() TableConfig {
				tc := QueueTable("t", 10)
				tc.Signature = dictValue(map[string]*tensorflowpb.StructuredValue{})
				return tc
			}()}}},
		{"yaml signature", "sig.yaml", sigYAML, sigCfg},
		{"textproto signature", "sig.textproto", sigTextproto, sigCfg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.file, tt.content)
			got, err := LoadConfigFile(path)
			if err != nil {
				t.Fatalf("LoadConfigFile: %v", err)
			}
			checkConfig(t, got, tt.want)
		})
	}
}

func TestLoadConfigFileBad(t *testing.T) {
	// A good table to put around bad ones.
	const goodTP = `tables { table_name: "good" sampler { fifo: true } remover { fifo: true } max_size: 10 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }` + "\n"
	tp := func(table string) string {
		return goodTP + `tables { table_name: "t" ` + table + " }\n"
	}
	const okSel = `sampler { fifo: true } remover { fifo: true } `
	const okRL = `rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } `

	const goodYAML = "tables:\n  - {name: good, queue: 5}\n"
	y := func(table string) string {
		return goodYAML + "  - name: t\n" + table
	}
	const okY = "    sampler: fifo\n    remover: fifo\n    max_size: 10\n"
	stir := func(s string) string {
		return y(okY + "    rate_limiter:\n      sample_to_insert_ratio: {" + s + "}\n")
	}
	sig := func(s string) string {
		return y("    queue: 3\n    signature: " + s + "\n")
	}

	tests := []struct {
		name, file, content string
		want                []string // substrings of the error after "config <path>: "
	}{
		// Files in general.
		{"extension", "a.json", "{}", []string{`unsupported file extension ".json"`}},
		{"no extension", "config", "{}", []string{`no file extension`}},

		// Textproto.
		{"tp empty", "a.textproto", "", []string{"tables: at least one table is required"}},
		{"tp port only", "a.textproto", "port: 8000", []string{"tables: at least one table is required"}},
		{"tp syntax", "a.textproto", "port: 1\ntables { max_size: x }", []string{"textproto: ", "line 2"}},
		{"tp truncated", "a.textproto", "tables { table_name: ", []string{"textproto: unexpected EOF"}},
		{"tp unknown field", "a.textproto", "ports: 1", []string{"textproto: ", "unknown field: ports"}},
		{"tp port range", "a.textproto", "port: 70000\n" + goodTP, []string{"port: must be in [0, 65535], got 70000"}},
		{"tp negative port", "a.textproto", "port: -1\n" + goodTP, []string{"port: must be in [0, 65535], got -1"}},
		{"tp empty name", "a.textproto", `tables { max_size: 1 }`, []string{"tables[0].table_name: must not be empty"}},
		{"tp duplicate name", "a.textproto", goodTP + goodTP, []string{`tables[1].table_name: duplicate table name "good" (also tables[0])`}},
		{"tp max_size 0", "a.textproto", tp(okSel + okRL), []string{"tables[1].max_size: must be > 0, got 0"}},
		{"tp max_size negative", "a.textproto", tp(okSel + okRL + "max_size: -3"), []string{"tables[1].max_size: must be > 0, got -3"}},
		{"tp no sampler", "a.textproto", tp("remover { fifo: true } max_size: 1 " + okRL), []string{"tables[1].sampler: required"}},
		{"tp empty sampler", "a.textproto", tp("sampler {} remover { fifo: true } max_size: 1 " + okRL), []string{"tables[1].sampler: no distribution set"}},
		{"tp only is_deterministic", "a.textproto", tp("sampler { is_deterministic: true } remover { fifo: true } max_size: 1 " + okRL), []string{"tables[1].sampler: no distribution set"}},
		{"tp fifo false", "a.textproto", tp("sampler { fifo: false } remover { fifo: true } max_size: 1 " + okRL), []string{"tables[1].sampler.fifo: must be true, got false"}},
		{"tp uniform false", "a.textproto", tp("sampler { fifo: true } remover { uniform: false } max_size: 1 " + okRL), []string{"tables[1].remover.uniform: must be true, got false"}},
		{"tp lifo false", "a.textproto", tp("sampler { lifo: false } remover { fifo: true } max_size: 1 " + okRL), []string{"tables[1].sampler.lifo: must be true, got false"}},
		{"tp no remover", "a.textproto", tp("sampler { fifo: true } max_size: 1 " + okRL), []string{"tables[1].remover: required"}},
		{"tp two distributions", "a.textproto", tp("sampler { fifo: true lifo: true } remover { fifo: true } max_size: 1 " + okRL), []string{"textproto: ", "oneof"}},
		{"tp negative exponent", "a.textproto", tp("sampler { prioritized { priority_exponent: -1 } } remover { fifo: true } max_size: 1 " + okRL),
			[]string{"tables[1].sampler.prioritized.priority_exponent: must be finite and >= 0, got -1"}},
		{"tp nan exponent", "a.textproto", tp("sampler { fifo: true } remover { prioritized { priority_exponent: nan } } max_size: 1 " + okRL),
			[]string{"tables[1].remover.prioritized.priority_exponent: must be finite and >= 0, got NaN"}},
		{"tp no rate limiter", "a.textproto", tp(okSel + "max_size: 1"), []string{"tables[1].rate_limiter: required"}},
		{"tp spi negative", "a.textproto", tp(okSel + "max_size: 1 rate_limiter { samples_per_insert: -1 min_size_to_sample: 1 }"),
			[]string{"tables[1].rate_limiter.samples_per_insert: must be > 0, got -1"}},
		{"tp spi missing", "a.textproto", tp(okSel + "max_size: 1 rate_limiter { min_size_to_sample: 1 }"),
			[]string{"tables[1].rate_limiter.samples_per_insert: must be > 0, got 0"}},
		{"tp spi inf", "a.textproto", tp(okSel + "max_size: 1 rate_limiter { samples_per_insert: inf min_size_to_sample: 1 }"),
			[]string{"tables[1].rate_limiter.samples_per_insert: must be > 0, got +Inf"}},
		{"tp min size 0", "a.textproto", tp(okSel + "max_size: 1 rate_limiter { samples_per_insert: 1 }"),
			[]string{"tables[1].rate_limiter.min_size_to_sample: must be >= 1, got 0"}},
		{"tp min_diff > max_diff", "a.textproto", tp(okSel + "max_size: 1 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: 2 max_diff: 1 }"),
			[]string{"tables[1].rate_limiter.max_diff: must be >= min_diff (2), got 1"}},
		{"tp nan diff", "a.textproto", tp(okSel + "max_size: 1 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: nan }"),
			[]string{"tables[1].rate_limiter.min_diff: must not be NaN"}},
		{"tp empty signature", "a.textproto", tp(okSel + okRL + "max_size: 1 signature {}"),
			[]string{"tables[1].signature: present but empty (no kind set)"}},
		{"tp empty nested signature", "a.textproto", tp(okSel + okRL + `max_size: 1 signature { list_value { values { tensor_spec_value { dtype: DT_FLOAT } } values {} } }`),
			[]string{"tables[1].signature.list_value.values[1]: present but empty"}},
		{"tp none in signature", "a.textproto", tp(okSel + okRL + `max_size: 1 signature { dict_value { fields { key: "a" value { none_value {} } } } }`),
			[]string{`tables[1].signature.dict_value.fields["a"]: none_value is not allowed in a table signature`}},
		{"tp invalid dtype", "a.textproto", tp(okSel + okRL + `max_size: 1 signature { tuple_value { values { tensor_spec_value { shape {} } } } }`),
			[]string{`tables[1].signature.tuple_value.values[0].tensor_spec_value.dtype: must be a valid DataType, got DT_INVALID`}},
		{"tp bad dim", "a.textproto", tp(okSel + okRL + `max_size: 1 signature { tensor_spec_value { dtype: DT_FLOAT shape { dim { size: 2 } dim { size: -2 } } } }`),
			[]string{`tables[1].signature.tensor_spec_value.shape.dim[1].size: must be >= -1`}},
		{"tp unknown rank with dims", "a.textproto", tp(okSel + okRL + `max_size: 1 signature { tensor_spec_value { dtype: DT_FLOAT shape { unknown_rank: true dim { size: 2 } } } }`),
			[]string{`tables[1].signature.tensor_spec_value.shape: unknown_rank is true but dims are given`}},

		// YAML: structure.
		{"yaml empty", "a.yaml", "", []string{"tables: at least one table is required"}},
		{"yaml comments only", "a.yaml", "# nothing\n", []string{"tables: at least one table is required"}},
		{"yaml no tables", "a.yaml", "port: 1\ntables: []\n", []string{"tables: at least one table is required"}},
		{"yaml syntax", "a.yaml", "tables:\n  - name: [\n", []string{"line "}},
		{"yaml two documents", "a.yaml", goodYAML + "---\n" + goodYAML, []string{"more than one YAML document"}},
		{"yaml not a mapping", "a.yaml", "- 1\n- 2\n", []string{"the document must be a mapping, got a list (line 1)"}},
		{"yaml wal no fsync", "a.yaml", goodYAML + "wal: {interval: 1s}\n", []string{`wal.fsync: required: always, interval or never (line 3)`}},
		{"yaml wal bad fsync", "a.yaml", goodYAML + "wal: {fsync: sometimes}\n", []string{`wal.fsync: want always, interval or never, got "sometimes" (line 3)`}},
		{"yaml wal bad interval", "a.yaml", goodYAML + "wal: {fsync: interval, interval: 10}\n", []string{`wal.interval: must be a positive duration such as 100ms, got "10" (line 3)`}},
		{"yaml wal unknown key", "a.yaml", goodYAML + "wal: {fsync: always, sync: x}\n", []string{`wal.sync: unknown key "sync"; want one of fsync, interval, dir, checkpoint_after_bytes (line 3)`}},
		{"yaml unknown top key", "a.yaml", goodYAML + "prot: 1\n", []string{`prot: unknown key "prot"; want one of port, listen, local_listen, transport, checkpoint_dir, checkpoint_write_rate, tables, wal, remote_snapshots, storage, tls, auth (line 3)`}},
		{"yaml unknown table key", "a.yaml", y(okY + "    rate_limter: {min_size: 1}\n"), []string{`tables[1].rate_limter: unknown key "rate_limter"; want one of name, sampler`, "(line 7)"}},
		{"yaml duplicate key", "a.yaml", y(okY + "    max_size: 11\n    rate_limiter: {min_size: 1}\n"), []string{`tables[1].max_size: duplicate key (first at line 6) (line 7)`}},
		{"yaml tables mapping", "a.yaml", "tables:\n  a: 1\n", []string{"tables: must be a list of tables, got a mapping (line 2)"}},
		{"yaml table scalar", "a.yaml", "tables:\n  - foo\n", []string{"tables[0]: a table must be a mapping, got a string (line 2)"}},
		{"yaml table null", "a.yaml", "tables:\n  - \n", []string{"tables[0]: a table must be a mapping, got null"}},
		{"yaml port string", "a.yaml", "port: abc\n" + goodYAML, []string{`port: must be an integer, got "abc" (line 1)`}},
		{"yaml port fraction", "a.yaml", "port: 80.5\n" + goodYAML, []string{`port: must be an integer, got "80.5"`}},
		{"yaml port range", "a.yaml", "port: 70000\n" + goodYAML, []string{"port: must be in [0, 65535], got 70000 (line 1)"}},
		{"yaml listen", "a.yaml", "listen: nonsense\n" + goodYAML, []string{`listen: want "host:port" or "unix:///path/to/sock", got "nonsense"`}},
		{"yaml listen empty unix", "a.yaml", "listen: unix://\n" + goodYAML, []string{`listen: unix socket path is empty`}},
		{"yaml local_listen tcp", "a.yaml", "local_listen: 127.0.0.1:9000\n" + goodYAML, []string{`local_listen: want a unix socket, "unix:///path/to/sock", got "127.0.0.1:9000"`, "(line 1)"}},
		{"yaml checkpoint_dir list", "a.yaml", "checkpoint_dir: [a]\n" + goodYAML, []string{`checkpoint_dir: must be a string, got a list`}},

		// YAML: tables.
		{"yaml no name", "a.yaml", goodYAML + "  - {queue: 3}\n", []string{"tables[1].name: required"}},
		{"yaml empty name", "a.yaml", goodYAML + "  - {name: '', queue: 3}\n", []string{"tables[1].name: must not be empty"}},
		{"yaml duplicate name", "a.yaml", goodYAML + "  - {name: good, queue: 3}\n", []string{`tables[1].name: duplicate table name "good" (also tables[0]) (line 3)`}},
		{"yaml no sampler", "a.yaml", y("    remover: fifo\n    max_size: 1\n    rate_limiter: {min_size: 1}\n"), []string{"tables[1].sampler: required"}},
		{"yaml no remover", "a.yaml", y("    sampler: fifo\n    max_size: 1\n    rate_limiter: {min_size: 1}\n"), []string{"tables[1].remover: required"}},
		{"yaml no max_size", "a.yaml", y("    sampler: fifo\n    remover: fifo\n    rate_limiter: {min_size: 1}\n"), []string{"tables[1].max_size: required"}},
		{"yaml max_size 0", "a.yaml", y("    sampler: fifo\n    remover: fifo\n    max_size: 0\n    rate_limiter: {min_size: 1}\n"), []string{"tables[1].max_size: must be > 0, got 0 (line 6)"}},
		{"yaml max_size fraction", "a.yaml", y("    sampler: fifo\n    remover: fifo\n    max_size: 1.5\n    rate_limiter: {min_size: 1}\n"), []string{`tables[1].max_size: must be an integer, got "1.5"`}},
		{"yaml max_times_sampled negative", "a.yaml", y(okY + "    max_times_sampled: -1\n    rate_limiter: {min_size: 1}\n"), []string{"tables[1].max_times_sampled: must be in [0, 2147483647] (0 is unlimited), got -1"}},
		{"yaml no rate limiter", "a.yaml", y(okY), []string{"tables[1].rate_limiter: required"}},
		{"yaml unknown selector", "a.yaml", y("    sampler: random\n"), []string{`tables[1].sampler: unknown selector "random"; want fifo, lifo, uniform, min_heap, max_heap or {prioritized: {priority_exponent: X}}`}},
		{"yaml custom selector", "a.yaml", y("    sampler: custom\n"), []string{`tables[1].sampler: unknown selector "custom"`}},
		{"yaml bare prioritized", "a.yaml", y("    sampler: prioritized\n"), []string{`tables[1].sampler: prioritized needs an exponent`}},
		{"yaml selector list", "a.yaml", y("    sampler: [fifo]\n"), []string{`tables[1].sampler: got a list; want fifo`}},
		{"yaml selector heap map", "a.yaml", y("    sampler: {heap: {min_heap: true}}\n"), []string{`tables[1].sampler.heap: unknown key "heap"; want one of prioritized`}},
		{"yaml prioritized no exponent", "a.yaml", y("    sampler: {prioritized: {}}\n"), []string{`tables[1].sampler.prioritized.priority_exponent: required`}},
		{"yaml prioritized bad key", "a.yaml", y("    sampler: {prioritized: {exponent: 1}}\n"), []string{`tables[1].sampler.prioritized.exponent: unknown key "exponent"; want one of priority_exponent`}},
		{"yaml prioritized negative", "a.yaml", y("    sampler: fifo\n    remover: {prioritized: {priority_exponent: -0.5}}\n"), []string{`tables[1].remover.prioritized.priority_exponent: must be finite and >= 0, got -0.5 (line 5)`}},

		// YAML: shorthand.
		{"yaml queue and sampler", "a.yaml", y("    queue: 3\n    sampler: lifo\n"), []string{"tables[1].sampler: cannot be combined with the queue shorthand"}},
		{"yaml stack and rate limiter", "a.yaml", y("    stack: 3\n    rate_limiter: {min_size: 1}\n"), []string{"tables[1].rate_limiter: cannot be combined with the stack shorthand"}},
		{"yaml queue and max_times_sampled", "a.yaml", y("    queue: 3\n    max_times_sampled: 2\n"), []string{"tables[1].max_times_sampled: cannot be combined with the queue shorthand"}},
		{"yaml queue and stack", "a.yaml", y("    queue: 3\n    stack: 3\n"), []string{"tables[1].stack: cannot be combined with queue"}},
		{"yaml queue 0", "a.yaml", y("    queue: 0\n"), []string{"tables[1].queue: must be >= 1, got 0"}},
		{"yaml stack string", "a.yaml", y("    stack: big\n"), []string{`tables[1].stack: must be an integer, got "big"`}},

		// YAML: rate limiters.
		{"yaml rl empty", "a.yaml", y(okY + "    rate_limiter: {}\n"), []string{"tables[1].rate_limiter: empty; want exactly one of"}},
		{"yaml rl scalar", "a.yaml", y(okY + "    rate_limiter: 5\n"), []string{`tables[1].rate_limiter: must be a mapping, got "5"`}},
		{"yaml rl unknown", "a.yaml", y(okY + "    rate_limiter: {minsize: 1}\n"), []string{`tables[1].rate_limiter.minsize: unknown key "minsize"`}},
		{"yaml rl two forms", "a.yaml", y(okY + "    rate_limiter: {min_size: 1, queue: 3}\n"), []string{"tables[1].rate_limiter.queue: cannot be combined with min_size"}},
		{"yaml rl form and generic", "a.yaml", y(okY + "    rate_limiter: {samples_per_insert: 1, min_size: 3}\n"), []string{"tables[1].rate_limiter.min_size: cannot be combined with samples_per_insert"}},
		{"yaml min_size 0", "a.yaml", y(okY + "    rate_limiter: {min_size: 0}\n"), []string{"tables[1].rate_limiter.min_size: must be >= 1, got 0"}},
		{"yaml rl queue 0", "a.yaml", y(okY + "    rate_limiter: {queue: 0}\n"), []string{"tables[1].rate_limiter.queue: must be >= 1, got 0"}},
		{"yaml generic missing", "a.yaml", y(okY + "    rate_limiter: {samples_per_insert: 1, min_size_to_sample: 1, min_diff: 0}\n"),
			[]string{"tables[1].rate_limiter.max_diff: required in the generic form"}},
		{"yaml generic spi", "a.yaml", y(okY + "    rate_limiter: {samples_per_insert: -1, min_size_to_sample: 1, min_diff: 0, max_diff: 1}\n"),
			[]string{"tables[1].rate_limiter.samples_per_insert: must be > 0, got -1 (line 7)"}},
		{"yaml generic min size", "a.yaml", y(okY + "    rate_limiter: {samples_per_insert: 1, min_size_to_sample: 0, min_diff: 0, max_diff: 1}\n"),
			[]string{"tables[1].rate_limiter.min_size_to_sample: must be >= 1, got 0"}},
		{"yaml generic nan", "a.yaml", y(okY + "    rate_limiter: {samples_per_insert: 1, min_size_to_sample: 1, min_diff: .nan, max_diff: 1}\n"),
			[]string{"tables[1].rate_limiter.min_diff: must not be NaN"}},
		{"yaml generic order", "a.yaml", y(okY + "    rate_limiter: {samples_per_insert: 1, min_size_to_sample: 1, min_diff: 2, max_diff: 1}\n"),
			[]string{"tables[1].rate_limiter.max_diff: must be >= min_diff (2), got 1"}},
		{"yaml generic string", "a.yaml", y(okY + "    rate_limiter: {samples_per_insert: one, min_size_to_sample: 1, min_diff: 2, max_diff: 1}\n"),
			[]string{`tables[1].rate_limiter.samples_per_insert: must be a number, got "one"`}},
		{"yaml stir spi", "a.yaml", stir("samples_per_insert: -1, min_size_to_sample: 1, error_buffer: 10"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.samples_per_insert: must be > 0, got -1"}},
		{"yaml stir spi zero", "a.yaml", stir("samples_per_insert: 0, min_size_to_sample: 1, error_buffer: 10"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.samples_per_insert: must be > 0, got 0"}},
		{"yaml stir no spi", "a.yaml", stir("min_size_to_sample: 1, error_buffer: 10"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.samples_per_insert: required"}},
		{"yaml stir min size", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 0, error_buffer: 10"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.min_size_to_sample: must be >= 1, got 0"}},
		{"yaml stir no buffer", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 1"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.min_diff: required: give error_buffer, or min_diff and max_diff"}},
		{"yaml stir only min_diff", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 1, min_diff: 0"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.max_diff: required"}},
		{"yaml stir both", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 1, error_buffer: 10, max_diff: 3"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.max_diff: cannot be combined with error_buffer"}},
		{"yaml stir small buffer", "a.yaml", stir("samples_per_insert: 4, min_size_to_sample: 1000, error_buffer: 3"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.error_buffer: must be >= max(1, samples_per_insert) = 4, got 3"}},
		{"yaml stir small buffer spi<1", "a.yaml", stir("samples_per_insert: 0.5, min_size_to_sample: 10, error_buffer: 0.9"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.error_buffer: must be >= max(1, samples_per_insert) = 1, got 0.9"}},
		{"yaml stir negative buffer", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 1, error_buffer: -5"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.error_buffer: must be >= 0, got -5"}},
		{"yaml stir narrow range", "a.yaml", stir("samples_per_insert: 4, min_size_to_sample: 1000, min_diff: 3000, max_diff: 3007"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.max_diff: max_diff - min_diff must be >= 2*max(1, samples_per_insert) = 8, got 3007 - 3000 = 7"}},
		{"yaml stir min_diff too big", "a.yaml", stir("samples_per_insert: 4, min_size_to_sample: 1000, min_diff: 4001, max_diff: 5000"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.min_diff: min_diff must be <= samples_per_insert*min_size_to_sample = 4000, got 4001"}},
		{"yaml stir pair narrow", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 1, error_buffer: [0, 1]"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.error_buffer: max_diff - min_diff must be >= 2*max(1, samples_per_insert) = 2"}},
		{"yaml stir pair length", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 1, error_buffer: [0, 1, 2]"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.error_buffer: a list must be [min_diff, max_diff], got 3 items"}},
		{"yaml stir both infinite", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 1, min_diff: .inf, max_diff: .inf"),
			[]string{"tables[1].rate_limiter.sample_to_insert_ratio.max_diff: max_diff - min_diff must be >= 2"}},
		{"yaml stir unknown key", "a.yaml", stir("samples_per_insert: 1, min_size_to_sample: 1, buffer: 3"),
			[]string{`tables[1].rate_limiter.sample_to_insert_ratio.buffer: unknown key "buffer"`}},

		// YAML: signatures.
		{"yaml sig scalar", "a.yaml", sig("3"), []string{`tables[1].signature: got "3"; want a tensor spec`}},
		{"yaml sig leaf scalar", "a.yaml", sig("{obs: float32}"), []string{`tables[1].signature.obs: got "float32"; want a tensor spec`}},
		{"yaml sig bad dtype", "a.yaml", sig("{obs: {dtype: float}}"), []string{`tables[1].signature.obs.dtype: unknown dtype "float"; want bool, float16`}},
		{"yaml sig dtype list", "a.yaml", sig("{obs: {dtype: [float32]}}"), []string{`tables[1].signature.obs.dtype: must be a string, got a list`}},
		{"yaml sig leaf unknown key", "a.yaml", sig("{obs: {dtype: float32, shap: [3]}}"), []string{`tables[1].signature.obs.shap: unknown key "shap"; want one of dtype, shape, name`}},
		{"yaml sig bad shape", "a.yaml", sig("{obs: {dtype: float32, shape: 3}}"), []string{`tables[1].signature.obs.shape: must be a list of dimension sizes`}},
		{"yaml sig bad dim", "a.yaml", sig("{obs: {dtype: float32, shape: [1, -2]}}"), []string{`tables[1].signature.obs.shape[1]: must be >= 0, or null or -1 for unknown, got -2`}},
		{"yaml sig string dim", "a.yaml", sig("{obs: {dtype: float32, shape: [1, x]}}"), []string{`tables[1].signature.obs.shape[1]: must be an integer, got "x"`}},
		{"yaml sig deep", "a.yaml", sig("[{a: {tuple: [{dtype: int8}, {dtype: nope}]}}]"), []string{`tables[1].signature[0].a.tuple[1].dtype: unknown dtype "nope"`}},
		{"yaml sig quoted key", "a.yaml", sig(`{"a b": {dtype: nope}}`), []string{`tables[1].signature["a b"].dtype: unknown dtype "nope"`}},
		{"yaml sig duplicate key", "a.yaml", sig("{a: {dtype: int8}, a: {dtype: int8}}"), []string{`duplicate key`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.file, tt.content)
			cfg, err := LoadConfigFile(path)
			if err == nil {
				t.Fatalf("LoadConfigFile succeeded: %+v", cfg)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			msg := err.Error()
			t.Log(msg)
			prefix := "config " + path + ": "
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("error %q does not start with %q", msg, prefix)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Errorf("config on error = %+v, want zero", cfg)
			}
		})
	}
}

// The example in the brief: the error names file, field and reason.
func TestLoadConfigFileErrorFormat(t *testing.T) {
	path := writeConfig(t, "x.yaml", `tables:
  - {name: a, queue: 1}
  - name: b
    sampler: uniform
    remover: fifo
    max_size: 10
    rate_limiter: {samples_per_insert: -1, min_size_to_sample: 1, min_diff: 0, max_diff: 1}
`)
	_, err := LoadConfigFile(path)
	want := "config " + path + ": tables[1].rate_limiter.samples_per_insert: must be > 0, got -1 (line 7)"
	if err == nil || err.Error() != want {
		t.Errorf("got error %v\nwant       %s", err, want)
	}

	// Several unknown keys are all reported, each with its line.
	path = writeConfig(t, "x.yaml", "prot: 1\ntables:\n  - {name: a, queue: 1, size: 3}\n")
	_, err = LoadConfigFile(path)
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{
		"config " + path + `: prot: unknown key "prot"; want one of port, listen, local_listen, transport, checkpoint_dir, checkpoint_write_rate, tables, wal, remote_snapshots, storage, tls, auth (line 1)`,
		"config " + path + `: tables[0].size: unknown key "size"; want one of name, sampler, remover, max_size, max_times_sampled, rate_limiter, queue, stack, signature (line 3)`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
	}
}

func TestLoadConfigFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := LoadConfigFile(path)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want fs.ErrNotExist", err)
	}
	if errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a missing file is not an invalid config: %v", err)
	}
	if err == nil || !strings.HasPrefix(err.Error(), "config "+path+": ") {
		t.Errorf("error %v does not name the file", err)
	}
}

func TestSignatureYAMLMatchesTextproto(t *testing.T) {
	fromYAML, err := LoadConfigFile(writeConfig(t, "s.yaml", sigYAML))
	if err != nil {
		t.Fatal(err)
	}
	fromTP, err := LoadConfigFile(writeConfig(t, "s.textproto", sigTextproto))
	if err != nil {
		t.Fatal(err)
	}
	checkConfig(t, fromYAML, fromTP)
	// The signature survives the wire.
	b, err := proto.Marshal(fromYAML.Tables[0].Signature)
	if err != nil {
		t.Fatal(err)
	}
	var back tensorflowpb.StructuredValue
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&back, nestedSignature()) {
		t.Errorf("round trip: got %v", prototext.Format(&back))
	}
	if field, reason := checkSignature(&back); reason != "" {
		t.Errorf("checkSignature(%s): %s", field, reason)
	}
}

func TestYAMLDTypes(t *testing.T) {
	for name, want := range map[string]tensorflowpb.DataType{
		"bool": 10, "float16": 19, "bfloat16": 14, "float32": 1, "float64": 2,
		"int8": 6, "int16": 5, "int32": 3, "int64": 9,
		"uint8": 4, "uint16": 17, "uint32": 22, "uint64": 23,
		"complex64": 8, "complex128": 18, "string": 7,
	} {
		cfg, err := LoadConfigFile(writeConfig(t, "d.yaml", "tables: [{name: t, queue: 1, signature: {dtype: "+name+", shape: [2]}}]"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := cfg.Tables[0].Signature.GetTensorSpecValue().GetDtype(); got != want {
			t.Errorf("%s: dtype %v, want %v", name, got, want)
		}
	}
}

func TestSelectorSpecProto(t *testing.T) {
	tests := []struct {
		spec  selector.Spec
		proto string // prototext of the options
	}{
		{fifoSpec, "fifo: true is_deterministic: true"},
		{lifoSpec, "lifo: true is_deterministic: true"},
		{uniformSpec, "uniform: true"},
		{selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 0.6}, "prioritized { priority_exponent: 0.6 }"},
		{selector.Spec{Kind: selector.KindPrioritized}, "prioritized {}"},
		{selector.Spec{Kind: selector.KindMinHeap}, "heap { min_heap: true } is_deterministic: true"},
		{selector.Spec{Kind: selector.KindMaxHeap}, "heap {} is_deterministic: true"},
	}
	for _, tt := range tests {
		t.Run(tt.spec.Kind.String(), func(t *testing.T) {
			want := &reverbpb.KeyDistributionOptions{}
			if err := prototext.Unmarshal([]byte(tt.proto), want); err != nil {
				t.Fatal(err)
			}
			got := SelectorSpecToProto(tt.spec)
			if !proto.Equal(got, want) {
				t.Errorf("SelectorSpecToProto(%+v) = %v, want %v", tt.spec, got, want)
			}
			if got.GetIsDeterministic() != tt.spec.Deterministic() {
				t.Errorf("is_deterministic %v, Spec.Deterministic %v", got.GetIsDeterministic(), tt.spec.Deterministic())
			}
			back, err := SelectorSpecFromProto(want)
			if err != nil {
				t.Fatalf("SelectorSpecFromProto(%v): %v", want, err)
			}
			if back != tt.spec {
				t.Errorf("SelectorSpecFromProto(%v) = %+v, want %+v", want, back, tt.spec)
			}
			// is_deterministic is ignored on the way in.
			want.IsDeterministic = !want.IsDeterministic
			if back, err := SelectorSpecFromProto(want); err != nil || back != tt.spec {
				t.Errorf("with is_deterministic flipped: %+v, %v", back, err)
			}
		})
	}

	for _, spec := range []selector.Spec{{Kind: selector.KindCustom, Name: "mine"}, {}, {Kind: selector.Kind(99)}} {
		got := SelectorSpecToProto(spec)
		if got == nil || got.GetDistribution() != nil || got.GetIsDeterministic() {
			t.Errorf("SelectorSpecToProto(%+v) = %v, want an empty message", spec, got)
		}
		if _, err := SelectorSpecFromProto(got); err == nil {
			t.Errorf("SelectorSpecFromProto(%v) succeeded", got)
		}
	}

	for _, tt := range []struct {
		proto, want string
	}{
		{"", "no distribution set"},
		{"is_deterministic: true", "no distribution set"},
		{"fifo: false", "fifo: must be true, got false"},
		{"uniform: false", "uniform: must be true, got false"},
		{"lifo: false", "lifo: must be true, got false"},
		{"prioritized { priority_exponent: -1 }", "prioritized.priority_exponent: must be finite and >= 0, got -1"},
		{"prioritized { priority_exponent: inf }", "prioritized.priority_exponent: must be finite and >= 0, got +Inf"},
	} {
		o := &reverbpb.KeyDistributionOptions{}
		if err := prototext.Unmarshal([]byte(tt.proto), o); err != nil {
			t.Fatal(err)
		}
		_, err := SelectorSpecFromProto(o)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("SelectorSpecFromProto(%s) = %v, want %q wrapping ErrInvalidConfig", tt.proto, err, tt.want)
		}
	}
	if _, err := SelectorSpecFromProto(nil); err == nil || !strings.HasPrefix(err.Error(), "required") {
		t.Errorf("SelectorSpecFromProto(nil) = %v", err)
	}
}

func TestExampleConfigs(t *testing.T) {
	dir := filepath.Join("..", "examples", "config")
	cfg, err := LoadConfigFile(filepath.Join(dir, "reverb_server.textproto"))
	if err != nil {
		t.Fatal(err)
	}
	checkConfig(t, cfg, readmeConfig())

	cfg, err = LoadConfigFile(filepath.Join(dir, "reverie.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Port: 8000, Tables: []TableConfig{
		{
			Name:        "priority_replay",
			Sampler:     selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 0.6},
			Remover:     fifoSpec,
			MaxSize:     1_000_000,
			RateLimiter: SampleToInsertRatio(4, 1000, 100),
			Signature: dictValue(map[string]*tensorflowpb.StructuredValue{
				"observation": tensorSpec(tensorflowpb.DataType_DT_FLOAT, "", -1, 84, 84, 3),
				"action":      tensorSpec(tensorflowpb.DataType_DT_INT64, "", -1),
				"reward":      tensorSpec(tensorflowpb.DataType_DT_FLOAT, "reward", -1),
			}),
		},
		{Name: "uniform_replay", Sampler: uniformSpec, Remover: fifoSpec, MaxSize: 100_000, RateLimiter: MinSize(1)},
		QueueTable("trajectories", 128),
	}}
	want.Tables[2].Signature = tupleValue(
		tensorSpec(tensorflowpb.DataType_DT_FLOAT, "", 20, 4),
		tensorSpec(tensorflowpb.DataType_DT_INT32, "", 20),
	)
	checkConfig(t, cfg, want)
}

// TestValidateSignatureOfEmbeddedConfig: a signature built in Go is
// checked as one read from a config file is; an empty one would be sent
// by ServerInfo and break Reverb's clients for every table.
func TestValidateSignatureOfEmbeddedConfig(t *testing.T) {
	tc := TableConfig{Name: "t", Sampler: selector.Spec{Kind: selector.KindUniform}, Remover: selector.Spec{Kind: selector.KindFIFO}, MaxSize: 10, RateLimiter: MinSize(1)}
	for _, tt := range []struct {
		sig  *tensorflowpb.StructuredValue
		want string
	}{
		{&tensorflowpb.StructuredValue{}, `tables[0] ("t").signature: present but empty`},
		{&tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_ListValue{ListValue: &tensorflowpb.ListValue{
			Values: []*tensorflowpb.StructuredValue{{Kind: &tensorflowpb.StructuredValue_Float64Value{Float64Value: 1}}},
		}}}, `tables[0] ("t").signature.list_value.values[0]`},
	} {
		tc.Signature = tt.sig
		cfg := Config{Tables: []TableConfig{tc}}
		err := cfg.Validate()
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate with signature %v = %v, want an ErrInvalidConfig naming %q", tt.sig, err, tt.want)
		}
	}
	tc.Signature = &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_TensorSpecValue{TensorSpecValue: &tensorflowpb.TensorSpecProto{
		Dtype: tensorflowpb.DataType_DT_FLOAT, Shape: &tensorflowpb.TensorShapeProto{},
	}}}
	if err := (&Config{Tables: []TableConfig{tc}}).Validate(); err != nil {
		t.Errorf("Validate with a float32 scalar signature: %v", err)
	}
}
