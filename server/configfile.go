package server

// Loading a Config from a file: reverie's own YAML format and Reverb's
// ReverbServerConfig textproto (the --config of Reverb's reverb_server).
// docs/config.md describes both formats.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/wal"
	"github.com/reverie-rl/reverie/selector"
)

// LoadConfigFile reads a server config from path. The extension picks the
// format: ".yaml" or ".yml" is reverie's YAML format; ".textproto" or
// ".pbtxt" is Reverb's ReverbServerConfig text proto, as given to Reverb's
// reverb_server executable. docs/config.md describes both.
//
// The config starts from Port DefaultPort and no tables: the file must name
// at least one table. The result has passed Config.Validate.
//
// Errors name the file, the field and the reason, e.g.
//
//	config x.yaml: tables[1].rate_limiter.samples_per_insert: must be > 0, got -1 (line 12)
//
// Every error about the file's contents wraps ErrInvalidConfig; an error
// reading the file wraps the error of the os package instead.
func LoadConfigFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return parseConfigFile(path, data)
}

// parseConfigFile is LoadConfigFile on data already read from path.
func parseConfigFile(path string, data []byte) (Config, error) {
	p := &cfgParser{file: path}
	cfg := Config{Port: DefaultPort}
	var err error
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		err = p.parseYAML(data, &cfg)
	case ".textproto", ".pbtxt":
		err = p.parseTextproto(data, &cfg)
	case "":
		err = p.errf("", 0, "no file extension; want .yaml, .yml, .textproto or .pbtxt")
	default:
		err = p.errf("", 0, "unsupported file extension %q; want .yaml, .yml, .textproto or .pbtxt", ext)
	}
	if err != nil {
		return Config{}, err
	}
	if verr := cfg.Validate(); verr != nil {
		reason := strings.TrimPrefix(verr.Error(), ErrInvalidConfig.Error()+": ")
		return Config{}, &configError{file: path, reason: reason, cause: verr}
	}
	return cfg, nil
}

// configError is the error of a config file: the file, the field path
// within it, the reason and, for YAML, the line.
type configError struct {
	file   string // empty when not loading a file
	path   string // e.g. tables[1].rate_limiter.samples_per_insert; may be empty
	reason string
	line   int // 0 when unknown
	cause  error
}

func (e *configError) Error() string {
	var b strings.Builder
	if e.file != "" {
		b.WriteString("config ")
		b.WriteString(e.file)
		b.WriteString(": ")
	}
	if e.path != "" {
		b.WriteString(e.path)
		b.WriteString(": ")
	}
	b.WriteString(e.reason)
	if e.line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.line)
	}
	return b.String()
}

func (e *configError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrInvalidConfig, e.cause}
	}
	return []error{ErrInvalidConfig}
}

type cfgParser struct {
	file string
}

func (p *cfgParser) errf(path string, line int, format string, args ...any) *configError {
	return &configError{file: p.file, path: path, line: line, reason: fmt.Sprintf(format, args...)}
}

// yerrf is errf at the line of a YAML node (n may be nil).
func (p *cfgParser) yerrf(path string, n *yaml.Node, format string, args ...any) *configError {
	line := 0
	if n != nil {
		line = n.Line
	}
	return p.errf(path, line, format, args...)
}

// cfgJoinPath appends a relative field path to a path: "a" + "b.c" =
// "a.b.c", "a" + "[1]" = "a[1]".
func cfgJoinPath(path, sub string) string {
	switch {
	case sub == "":
		return path
	case path == "", strings.HasPrefix(sub, "["):
		return path + sub
	}
	return path + "." + sub
}

// cfgKeyPath appends a mapping key to a path, quoting keys that are not
// identifiers: "a" + "b" = "a.b", "a" + "x y" = `a["x y"]`.
func cfgKeyPath(path, key string) string {
	if !cfgIdentRE.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	return cfgJoinPath(path, key)
}

var cfgIdentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// clampInf maps ±Inf to ±math.MaxFloat64, the ±DBL_MAX Reverb writes for
// unbounded diffs.
func clampInf(v float64) float64 {
	switch {
	case math.IsInf(v, 1):
		return math.MaxFloat64
	case math.IsInf(v, -1):
		return -math.MaxFloat64
	}
	return v
}

// ---------------------------------------------------------------------------
// Selectors <-> KeyDistributionOptions

// SelectorSpecFromProto converts Reverb's KeyDistributionOptions to a
// selector.Spec following Reverb's reverb_server: fifo, uniform and lifo must
// be true (present but false is an error); heap gives KindMinHeap when
// min_heap is true and KindMaxHeap otherwise; prioritized gives
// KindPrioritized with its priority_exponent, which must be finite and >= 0;
// a nil message or one with no distribution set is an error.
// is_deterministic is ignored. Errors wrap ErrInvalidConfig and name the
// field relative to the message, e.g. "fifo: must be true, got false".
func SelectorSpecFromProto(o *reverbpb.KeyDistributionOptions) (selector.Spec, error) {
	s, field, reason := selectorFromProto(o)
	if reason != "" {
		return selector.Spec{}, &configError{path: field, reason: reason}
	}
	return s, nil
}

const wantDistribution = "want one of fifo: true, uniform: true, lifo: true, prioritized {priority_exponent: X} or heap {min_heap: B}"

// selectorFromProto is SelectorSpecFromProto returning the failing field
// (relative to o) and the reason; reason is "" on success.
func selectorFromProto(o *reverbpb.KeyDistributionOptions) (s selector.Spec, field, reason string) {
	if o == nil {
		return s, "", "required; " + wantDistribution
	}
	switch d := o.GetDistribution().(type) {
	case *reverbpb.KeyDistributionOptions_Fifo:
		if !d.Fifo {
			return s, "fifo", "must be true, got false"
		}
		return selector.Spec{Kind: selector.KindFIFO}, "", ""
	case *reverbpb.KeyDistributionOptions_Uniform:
		if !d.Uniform {
			return s, "uniform", "must be true, got false"
		}
		return selector.Spec{Kind: selector.KindUniform}, "", ""
	case *reverbpb.KeyDistributionOptions_Lifo:
		if !d.Lifo {
			return s, "lifo", "must be true, got false"
		}
		return selector.Spec{Kind: selector.KindLIFO}, "", ""
	case *reverbpb.KeyDistributionOptions_Heap_:
		if d.Heap.GetMinHeap() {
			return selector.Spec{Kind: selector.KindMinHeap}, "", ""
		}
		return selector.Spec{Kind: selector.KindMaxHeap}, "", ""
	case *reverbpb.KeyDistributionOptions_Prioritized_:
		e := d.Prioritized.GetPriorityExponent()
		if r := checkExponent(e); r != "" {
			return s, "prioritized.priority_exponent", r
		}
		return selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: e}, "", ""
	case nil:
		return s, "", "no distribution set; " + wantDistribution
	default:
		return s, "", fmt.Sprintf("unsupported distribution %T", d)
	}
}

func checkExponent(e float64) string {
	if math.IsNaN(e) || math.IsInf(e, 0) || e < 0 {
		return fmt.Sprintf("must be finite and >= 0, got %v", e)
	}
	return ""
}

// SelectorSpecToProto converts a selector.Spec to Reverb's
// KeyDistributionOptions, setting is_deterministic as Reverb does (true for
// FIFO, LIFO and both heaps). A KindCustom spec, or any kind without a
// Reverb equivalent, gives a message with no distribution set and
// is_deterministic false.
func SelectorSpecToProto(s selector.Spec) *reverbpb.KeyDistributionOptions {
	o := &reverbpb.KeyDistributionOptions{}
	switch s.Kind {
	case selector.KindFIFO:
		o.Distribution = &reverbpb.KeyDistributionOptions_Fifo{Fifo: true}
		o.IsDeterministic = true
	case selector.KindLIFO:
		o.Distribution = &reverbpb.KeyDistributionOptions_Lifo{Lifo: true}
		o.IsDeterministic = true
	case selector.KindUniform:
		o.Distribution = &reverbpb.KeyDistributionOptions_Uniform{Uniform: true}
	case selector.KindPrioritized:
		o.Distribution = &reverbpb.KeyDistributionOptions_Prioritized_{
			Prioritized: &reverbpb.KeyDistributionOptions_Prioritized{PriorityExponent: s.PriorityExponent},
		}
	case selector.KindMinHeap:
		o.Distribution = &reverbpb.KeyDistributionOptions_Heap_{Heap: &reverbpb.KeyDistributionOptions_Heap{MinHeap: true}}
		o.IsDeterministic = true
	case selector.KindMaxHeap:
		o.Distribution = &reverbpb.KeyDistributionOptions_Heap_{Heap: &reverbpb.KeyDistributionOptions_Heap{MinHeap: false}}
		o.IsDeterministic = true
	}
	return o
}

// ---------------------------------------------------------------------------
// Reverb textproto

// serverConfigWithPortPresence is ReverbServerConfig with `port` turned into
// a proto3 optional field, so that an absent port (DefaultPort) can be told
// from `port: 0` (the OS picks a port). The wire format is unchanged.
var serverConfigWithPortPresence = sync.OnceValues(func() (protoreflect.MessageDescriptor, error) {
	fdp := protodesc.ToFileDescriptorProto(reverbpb.File_deepmind_reverb_reverb_config_proto)
	found := false
	for _, m := range fdp.GetMessageType() {
		if m.GetName() != "ReverbServerConfig" {
			continue
		}
		for _, f := range m.GetField() {
			if f.GetName() == "port" {
				f.Proto3Optional = proto.Bool(true)
				f.OneofIndex = proto.Int32(int32(len(m.GetOneofDecl())))
				m.OneofDecl = append(m.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: proto.String("_port")})
				found = true
			}
		}
	}
	if !found {
		return nil, errors.New("ReverbServerConfig.port not found")
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		return nil, err
	}
	md := fd.Messages().ByName("ReverbServerConfig")
	if md == nil {
		return nil, errors.New("ReverbServerConfig not found")
	}
	return md, nil
})

// unmarshalServerConfig parses a ReverbServerConfig textproto and reports
// whether it sets port.
func unmarshalServerConfig(data []byte, msg *reverbpb.ReverbServerConfig) (portSet bool, err error) {
	md, derr := serverConfigWithPortPresence()
	if derr != nil {
		// Cannot happen with the generated descriptor; fall back to treating
		// port 0 as absent.
		if err := prototext.Unmarshal(data, msg); err != nil {
			return false, err
		}
		return msg.GetPort() != 0, nil
	}
	dyn := dynamicpb.NewMessage(md)
	if err := prototext.Unmarshal(data, dyn); err != nil {
		return false, err
	}
	b, err := proto.Marshal(dyn)
	if err != nil {
		return false, err
	}
	if err := proto.Unmarshal(b, msg); err != nil {
		return false, err
	}
	return dyn.Has(md.Fields().ByName("port")), nil
}

// protoErrorText strips the "proto: " prefix (which the protobuf module
// sometimes writes with a non-breaking space) from a protobuf error.
func protoErrorText(err error) string {
	s := err.Error()
	for _, prefix := range []string{"proto: ", "proto:\u00a0"} {
		s = strings.TrimPrefix(s, prefix)
	}
	return s
}

func (p *cfgParser) parseTextproto(data []byte, cfg *Config) error {
	var msg reverbpb.ReverbServerConfig
	portSet, err := unmarshalServerConfig(data, &msg)
	if err != nil {
		return &configError{file: p.file, reason: "textproto: " + protoErrorText(err), cause: err}
	}
	if portSet {
		if msg.Port < 0 || msg.Port > 65535 {
			return p.errf("port", 0, "must be in [0, 65535], got %d", msg.Port)
		}
		cfg.Port = int(msg.Port)
	}
	if len(msg.Tables) == 0 {
		return p.errf("tables", 0, "at least one table is required")
	}
	seen := make(map[string]int, len(msg.Tables))
	for i, t := range msg.Tables {
		tc, err := p.textprotoTable(i, t, seen)
		if err != nil {
			return err
		}
		cfg.Tables = append(cfg.Tables, tc)
	}
	return nil
}

func (p *cfgParser) textprotoTable(i int, t *reverbpb.PriorityTableCheckpoint, seen map[string]int) (TableConfig, error) {
	path := fmt.Sprintf("tables[%d]", i)
	var tc TableConfig
	if t.GetTableName() == "" {
		return tc, p.errf(path+".table_name", 0, "must not be empty")
	}
	if j, dup := seen[t.GetTableName()]; dup {
		return tc, p.errf(path+".table_name", 0, "duplicate table name %q (also tables[%d])", t.GetTableName(), j)
	}
	seen[t.GetTableName()] = i
	if t.GetMaxSize() <= 0 {
		return tc, p.errf(path+".max_size", 0, "must be > 0, got %d", t.GetMaxSize())
	}
	sampler, field, reason := selectorFromProto(t.GetSampler())
	if reason != "" {
		return tc, p.errf(cfgJoinPath(path+".sampler", field), 0, "%s", reason)
	}
	remover, field, reason := selectorFromProto(t.GetRemover())
	if reason != "" {
		return tc, p.errf(cfgJoinPath(path+".remover", field), 0, "%s", reason)
	}
	rl, err := p.textprotoRateLimiter(path+".rate_limiter", t.GetRateLimiter())
	if err != nil {
		return tc, err
	}
	if t.Signature != nil {
		if field, reason := checkSignature(t.Signature); reason != "" {
			return tc, p.errf(cfgJoinPath(path+".signature", field), 0, "%s", reason)
		}
	}
	return TableConfig{
		Name:            t.GetTableName(),
		Sampler:         sampler,
		Remover:         remover,
		MaxSize:         t.GetMaxSize(),
		MaxTimesSampled: t.GetMaxTimesSampled(),
		RateLimiter:     rl,
		Signature:       t.Signature,
	}, nil
}

func (p *cfgParser) textprotoRateLimiter(path string, r *reverbpb.RateLimiterCheckpoint) (RateLimiter, error) {
	var rl RateLimiter
	if r == nil {
		return rl, p.errf(path, 0, "required")
	}
	if reason := checkSPI(r.GetSamplesPerInsert()); reason != "" {
		return rl, p.errf(path+".samples_per_insert", 0, "%s", reason)
	}
	if r.GetMinSizeToSample() < 1 {
		return rl, p.errf(path+".min_size_to_sample", 0, "must be >= 1, got %d", r.GetMinSizeToSample())
	}
	if math.IsNaN(r.GetMinDiff()) {
		return rl, p.errf(path+".min_diff", 0, "must not be NaN")
	}
	if math.IsNaN(r.GetMaxDiff()) {
		return rl, p.errf(path+".max_diff", 0, "must not be NaN")
	}
	rl = RateLimiter{
		SamplesPerInsert: r.GetSamplesPerInsert(),
		MinSizeToSample:  r.GetMinSizeToSample(),
		MinDiff:          clampInf(r.GetMinDiff()),
		MaxDiff:          clampInf(r.GetMaxDiff()),
	}
	if rl.MinDiff > rl.MaxDiff {
		return rl, p.errf(path+".max_diff", 0, "must be >= min_diff (%v), got %v", rl.MinDiff, rl.MaxDiff)
	}
	return rl, nil
}

func checkSPI(spi float64) string {
	if math.IsNaN(spi) || math.IsInf(spi, 0) || spi <= 0 {
		return fmt.Sprintf("must be > 0, got %v", spi)
	}
	return ""
}

// checkSignature checks that a table signature is something Reverb's
// clients can flatten: tensor_spec_value and bounded_tensor_spec_value
// leaves inside list_value, tuple_value, dict_value and named_tuple_value.
// Any other kind, including a present-but-empty value, makes every client
// of the server fail (Reverb's clients flatten it). It returns the failing field relative
// to sv and the reason; reason is "" when the signature is fine.
func checkSignature(sv *tensorflowpb.StructuredValue) (field, reason string) {
	switch k := sv.GetKind().(type) {
	case nil:
		return "", "present but empty (no kind set); want tensor_spec_value, bounded_tensor_spec_value, list_value, tuple_value, dict_value or named_tuple_value"
	case *tensorflowpb.StructuredValue_TensorSpecValue:
		f, r := checkSignatureSpec(k.TensorSpecValue.GetDtype(), k.TensorSpecValue.GetShape())
		return cfgJoinPath("tensor_spec_value", f), r
	case *tensorflowpb.StructuredValue_BoundedTensorSpecValue:
		f, r := checkSignatureSpec(k.BoundedTensorSpecValue.GetDtype(), k.BoundedTensorSpecValue.GetShape())
		return cfgJoinPath("bounded_tensor_spec_value", f), r
	case *tensorflowpb.StructuredValue_ListValue:
		for i, v := range k.ListValue.GetValues() {
			if f, r := checkSignature(v); r != "" {
				return cfgJoinPath(fmt.Sprintf("list_value.values[%d]", i), f), r
			}
		}
	case *tensorflowpb.StructuredValue_TupleValue:
		for i, v := range k.TupleValue.GetValues() {
			if f, r := checkSignature(v); r != "" {
				return cfgJoinPath(fmt.Sprintf("tuple_value.values[%d]", i), f), r
			}
		}
	case *tensorflowpb.StructuredValue_DictValue:
		keys := make([]string, 0, len(k.DictValue.GetFields()))
		for key := range k.DictValue.GetFields() {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			if f, r := checkSignature(k.DictValue.GetFields()[key]); r != "" {
				return cfgJoinPath(fmt.Sprintf("dict_value.fields[%q]", key), f), r
			}
		}
	case *tensorflowpb.StructuredValue_NamedTupleValue:
		for i, pv := range k.NamedTupleValue.GetValues() {
			if f, r := checkSignature(pv.GetValue()); r != "" {
				return cfgJoinPath(fmt.Sprintf("named_tuple_value.values[%d].value", i), f), r
			}
		}
	default:
		name := "unknown"
		if fd := sv.ProtoReflect().WhichOneof(sv.ProtoReflect().Descriptor().Oneofs().ByName("kind")); fd != nil {
			name = string(fd.Name())
		}
		return "", fmt.Sprintf("%s is not allowed in a table signature; Reverb clients accept only tensor_spec_value and bounded_tensor_spec_value leaves in list_value, tuple_value, dict_value and named_tuple_value", name)
	}
	return "", ""
}

func checkSignatureSpec(dtype tensorflowpb.DataType, shape *tensorflowpb.TensorShapeProto) (field, reason string) {
	if _, known := tensorflowpb.DataType_name[int32(dtype)]; !known || dtype == tensorflowpb.DataType_DT_INVALID {
		return "dtype", fmt.Sprintf("must be a valid DataType, got %v", dtype)
	}
	if shape.GetUnknownRank() && len(shape.GetDim()) > 0 {
		return "shape", "unknown_rank is true but dims are given"
	}
	for i, d := range shape.GetDim() {
		if d.GetSize() < -1 {
			return fmt.Sprintf("shape.dim[%d].size", i), fmt.Sprintf("must be >= -1 (-1 is unknown), got %d", d.GetSize())
		}
	}
	return "", ""
}

// ---------------------------------------------------------------------------
// reverie YAML

// yamlFile is the top level of a YAML config. Fields are yaml.Node so that
// errors can name lines; the decoder's KnownFields rejects unknown keys.
type yamlFile struct {
	Port          yaml.Node `yaml:"port"`
	Listen        yaml.Node `yaml:"listen"`
	LocalListen   yaml.Node `yaml:"local_listen"`
	Transport     yaml.Node `yaml:"transport"`
	CheckpointDir yaml.Node `yaml:"checkpoint_dir"`
	// Bytes per second; see Config.CheckpointWriteRate.
	CheckpointWriteRate yaml.Node   `yaml:"checkpoint_write_rate"`
	Tables              []yamlTable `yaml:"tables"`
	// Durable mode (the write-ahead log).
	WAL yaml.Node `yaml:"wal"`

	// Remote snapshots (configfile_snapshots.go).
	RemoteSnapshots yaml.Node `yaml:"remote_snapshots"`

	// Storage tiers (storage.go).
	Storage yaml.Node `yaml:"storage"`

	// TLS and bearer tokens (security.go).
	TLS  yaml.Node `yaml:"tls"`
	Auth yaml.Node `yaml:"auth"`
}

const yamlTopKeys = "port, listen, local_listen, transport, checkpoint_dir, checkpoint_write_rate, tables, wal, remote_snapshots, storage, tls, auth"

// yamlTable is one entry of tables.
type yamlTable struct {
	Name            yaml.Node `yaml:"name"`
	Sampler         yaml.Node `yaml:"sampler"`
	Remover         yaml.Node `yaml:"remover"`
	MaxSize         yaml.Node `yaml:"max_size"`
	MaxTimesSampled yaml.Node `yaml:"max_times_sampled"`
	RateLimiter     yaml.Node `yaml:"rate_limiter"`
	Queue           yaml.Node `yaml:"queue"`
	Stack           yaml.Node `yaml:"stack"`
	Signature       yaml.Node `yaml:"signature"`
}

const yamlTableKeys = "name, sampler, remover, max_size, max_times_sampled, rate_limiter, queue, stack, signature"

func (p *cfgParser) parseYAML(data []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f yamlFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return p.errf("tables", 0, "at least one table is required (the file is empty)")
		}
		return p.yamlDecodeError(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return p.yamlDecodeError(data, err)
		}
		return p.errf("", line, "more than one YAML document; want one")
	}

	if !yamlAbsent(&f.Port) {
		port, err := p.yint(&f.Port, "port")
		if err != nil {
			return err
		}
		if port < 0 || port > 65535 {
			return p.yerrf("port", &f.Port, "must be in [0, 65535], got %d", port)
		}
		cfg.Port = int(port)
	}
	if !yamlAbsent(&f.Listen) {
		listen, err := p.ystring(&f.Listen, "listen")
		if err != nil {
			return err
		}
		if reason := checkListen(listen); reason != "" {
			return p.yerrf("listen", &f.Listen, "%s", reason)
		}
		cfg.Listen = listen
	}
	if !yamlAbsent(&f.LocalListen) {
		local, err := p.ystring(&f.LocalListen, "local_listen")
		if err != nil {
			return err
		}
		if reason := checkLocalListen(local); reason != "" {
			return p.yerrf("local_listen", &f.LocalListen, "%s", reason)
		}
		cfg.LocalListen = local
	}
	if !yamlAbsent(&f.Transport) {
		tr, err := p.ystring(&f.Transport, "transport")
		if err != nil {
			return err
		}
		if reason := checkTransport(tr); reason != "" {
			return p.yerrf("transport", &f.Transport, "%s", reason)
		}
		cfg.Transport = tr
	}
	if !yamlAbsent(&f.CheckpointDir) {
		dir, err := p.ystring(&f.CheckpointDir, "checkpoint_dir")
		if err != nil {
			return err
		}
		cfg.CheckpointDir = dir
	}
	if !yamlAbsent(&f.CheckpointWriteRate) {
		rate, err := p.yint(&f.CheckpointWriteRate, "checkpoint_write_rate")
		if err != nil {
			return err
		}
		cfg.CheckpointWriteRate = rate
	}
	if !yamlAbsent(&f.WAL) {
		w, err := p.ywal(&f.WAL)
		if err != nil {
			return err
		}
		cfg.WAL = w
	}
	if err := p.yamlRemoteSnapshots(&f.RemoteSnapshots, cfg); err != nil {
		return err
	}
	if !yamlAbsent(&f.Storage) {
		sc, err := p.yamlStorage(&f.Storage)
		if err != nil {
			return err
		}
		cfg.Storage = sc
	}
	if err := p.yamlSecurity(&f.TLS, &f.Auth, cfg); err != nil {
		return err
	}
	// The nodes of the tables, for their lines.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return p.yamlDecodeError(data, err)
	}
	// yaml.v3 drops null entries from the decoded list; the nodes have
	// them all.
	nodes := yamlTableNodes(&root)
	if len(nodes) == 0 {
		for range f.Tables {
			nodes = append(nodes, &yaml.Node{Kind: yaml.MappingNode})
		}
	}
	if len(nodes) == 0 {
		return p.errf("tables", 0, "at least one table is required")
	}
	seen := make(map[string]int, len(nodes))
	decoded := f.Tables
	for i, n := range nodes {
		n = yamlResolve(n)
		var t yamlTable
		if n.Kind == yaml.MappingNode && len(decoded) > 0 {
			t, decoded = decoded[0], decoded[1:]
		}
		tc, err := p.yamlTable(i, &t, n, seen)
		if err != nil {
			return err
		}
		cfg.Tables = append(cfg.Tables, tc)
	}
	return nil
}

// ywal decodes the wal block: fsync, interval, dir, checkpoint_after_bytes.
func (p *cfgParser) ywal(n *yaml.Node) (WALConfig, error) {
	var w WALConfig
	m, _, err := p.ymapping(n, "wal", "fsync", "interval", "dir", "checkpoint_after_bytes")
	if err != nil {
		return w, err
	}
	fs, ok := m["fsync"]
	if !ok || yamlAbsent(fs) {
		return w, p.yerrf("wal.fsync", n, "required: always, interval or never")
	}
	if w.Fsync, err = p.ystring(fs, "wal.fsync"); err != nil {
		return w, err
	}
	if _, err := wal.ParseSync(w.Fsync); err != nil {
		return w, p.yerrf("wal.fsync", fs, "want always, interval or never, got %q", w.Fsync)
	}
	if v, ok := m["interval"]; ok && !yamlAbsent(v) {
		str, err := p.ystring(v, "wal.interval")
		if err != nil {
			return w, err
		}
		d, err := time.ParseDuration(str)
		if err != nil || d <= 0 {
			return w, p.yerrf("wal.interval", v, "must be a positive duration such as 100ms, got %q", str)
		}
		w.Interval = d
	}
	if v, ok := m["dir"]; ok && !yamlAbsent(v) {
		if w.Dir, err = p.ystring(v, "wal.dir"); err != nil {
			return w, err
		}
	}
	if v, ok := m["checkpoint_after_bytes"]; ok && !yamlAbsent(v) {
		if w.CheckpointAfterBytes, err = p.yint(v, "wal.checkpoint_after_bytes"); err != nil {
			return w, err
		}
	}
	return w, nil
}

// yamlTableNodes returns the entries of the top-level tables list.
func yamlTableNodes(root *yaml.Node) []*yaml.Node {
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = yamlResolve(doc.Content[0])
	}
	if doc.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "tables" {
			if seq := yamlResolve(doc.Content[i+1]); seq.Kind == yaml.SequenceNode {
				return seq.Content
			}
		}
	}
	return nil
}

func checkListen(listen string) string {
	if listen == "" {
		return ""
	}
	if rest, ok := strings.CutPrefix(listen, "unix://"); ok {
		if rest == "" {
			return `unix socket path is empty; want "unix:///path/to/sock"`
		}
		return ""
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return fmt.Sprintf(`want "host:port" or "unix:///path/to/sock", got %q`, listen)
	}
	return ""
}

var (
	yamlUnknownFieldRE = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)
	yamlDupKeyRE       = regexp.MustCompile(`^line (\d+): mapping key (".*") already defined at line (\d+)$`)
	yamlCannotRE       = regexp.MustCompile(`^line (\d+): cannot unmarshal !!(\w+)(?: .*)? into (\S+)$`)
	yamlLineRE         = regexp.MustCompile(`^line (\d+): (.*)$`)
)

// yamlDecodeError turns an error of yaml.Decoder.Decode into configErrors
// naming the field path, found by looking the line up in the document.
func (p *cfgParser) yamlDecodeError(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// A syntax error: "yaml: line 3: did not find expected key".
		return &configError{file: p.file, reason: strings.TrimPrefix(err.Error(), "yaml: "), cause: err}
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // parsed fine once already
	var errs []error
	for _, msg := range te.Errors {
		errs = append(errs, p.yamlTypeError(&root, msg))
	}
	return errors.Join(errs...)
}

func (p *cfgParser) yamlTypeError(root *yaml.Node, msg string) *configError {
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	if m := yamlUnknownFieldRE.FindStringSubmatch(msg); m != nil {
		line := atoi(m[1])
		want := yamlTableKeys
		if strings.HasSuffix(m[3], "yamlFile") {
			want = yamlTopKeys
		}
		return p.errf(yamlKeyPath(root, line, m[2]), line, "unknown key %q; want one of %s", m[2], want)
	}
	if m := yamlDupKeyRE.FindStringSubmatch(msg); m != nil {
		line := atoi(m[1])
		key, err := strconv.Unquote(m[2])
		if err != nil {
			key = m[2]
		}
		return p.errf(yamlKeyPath(root, line, key), line, "duplicate key (first at line %s)", m[3])
	}
	if m := yamlCannotRE.FindStringSubmatch(msg); m != nil {
		line := atoi(m[1])
		got := yamlDescribeTag("!!" + m[2])
		path := yamlNodePath(root, line, "!!"+m[2])
		switch {
		case strings.HasSuffix(m[3], "[]server.yamlTable"):
			return p.errf(path, line, "must be a list of tables, got %s", got)
		case strings.HasSuffix(m[3], "yamlTable"):
			return p.errf(path, line, "a table must be a mapping, got %s", got)
		case strings.HasSuffix(m[3], "yamlFile"):
			return p.errf(path, line, "the document must be a mapping, got %s", got)
		}
		return p.errf(path, line, "cannot decode %s", got)
	}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		return p.errf("", atoi(m[1]), "%s", m[2])
	}
	return p.errf("", 0, "%s", msg)
}

// yamlWalk visits the nodes of a document in order with their paths. visit
// gets key nodes with isKey true (and the path of their value). Aliases are
// not followed. It stops when visit returns true.
func yamlWalk(n *yaml.Node, path string, visit func(n *yaml.Node, path string, isKey bool) bool) bool {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if yamlWalk(c, path, visit) {
				return true
			}
		}
		return false
	}
	if visit(n, path, false) {
		return true
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := cfgKeyPath(path, k.Value)
			if visit(k, p, true) || yamlWalk(v, p, visit) {
				return true
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if yamlWalk(c, fmt.Sprintf("%s[%d]", path, i), visit) {
				return true
			}
		}
	}
	return false
}

// yamlKeyPath is the path of the mapping key named key on line.
func yamlKeyPath(root *yaml.Node, line int, key string) string {
	var found string
	yamlWalk(root, "", func(n *yaml.Node, path string, isKey bool) bool {
		if isKey && n.Line == line && n.Value == key {
			found = path
			return true
		}
		return false
	})
	return found
}

// yamlNodePath is the path of the first value node on line with tag.
func yamlNodePath(root *yaml.Node, line int, tag string) string {
	var found string
	yamlWalk(root, "", func(n *yaml.Node, path string, isKey bool) bool {
		if !isKey && n.Line == line && n.ShortTag() == tag {
			found = path
			return true
		}
		return false
	})
	return found
}

func yamlDescribeTag(tag string) string {
	switch tag {
	case "!!map":
		return "a mapping"
	case "!!seq":
		return "a list"
	case "!!str":
		return "a string"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	}
	return tag
}

// resolve follows aliases.
func yamlResolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// absent reports whether a field was left out or written as null.
func yamlAbsent(n *yaml.Node) bool {
	n = yamlResolve(n)
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func yamlDescribe(n *yaml.Node) string {
	n = yamlResolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// yint decodes an integer. Unlike yaml.v3 it rejects fractions.
func (p *cfgParser) yint(n *yaml.Node, path string) (int64, error) {
	n = yamlResolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		var v any
		if err := n.Decode(&v); err == nil {
			switch v := v.(type) {
			case int:
				return int64(v), nil
			case int64:
				return v, nil
			case uint64:
				if v <= math.MaxInt64 {
					return int64(v), nil
				}
			case float64:
				if v == math.Trunc(v) && v >= math.MinInt64 && v < math.MaxInt64 {
					return int64(v), nil
				}
			}
		}
	}
	return 0, p.yerrf(path, n, "must be an integer, got %s", yamlDescribe(n))
}

// yfloat decodes a number; .inf, -.inf and .nan are numbers.
func (p *cfgParser) yfloat(n *yaml.Node, path string) (float64, error) {
	n = yamlResolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		var v any
		if err := n.Decode(&v); err == nil {
			switch v := v.(type) {
			case int:
				return float64(v), nil
			case int64:
				return float64(v), nil
			case uint64:
				return float64(v), nil
			case float64:
				return v, nil
			}
		}
	}
	return 0, p.yerrf(path, n, "must be a number, got %s", yamlDescribe(n))
}

func (p *cfgParser) ystring(n *yaml.Node, path string) (string, error) {
	n = yamlResolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return "", p.yerrf(path, n, "must be a string, got %s", yamlDescribe(n))
	}
	return n.Value, nil
}

// ymapping returns the entries of a mapping node and its keys in order.
// With allowed given, other keys are errors.
func (p *cfgParser) ymapping(n *yaml.Node, path string, allowed ...string) (map[string]*yaml.Node, []string, error) {
	n = yamlResolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, nil, p.yerrf(path, n, "must be a mapping, got %s", yamlDescribe(n))
	}
	m := make(map[string]*yaml.Node, len(n.Content)/2)
	var order []string
	lines := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamlResolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!null" {
			return nil, nil, p.yerrf(path, k, "keys must be strings, got %s", yamlDescribe(k))
		}
		key := k.Value
		if first, dup := lines[key]; dup {
			return nil, nil, p.yerrf(cfgKeyPath(path, key), k, "duplicate key (first at line %d)", first)
		}
		if allowed != nil && !slices.Contains(allowed, key) {
			return nil, nil, p.yerrf(cfgKeyPath(path, key), k, "unknown key %q; want one of %s", key, strings.Join(allowed, ", "))
		}
		lines[key] = k.Line
		m[key] = v
		order = append(order, key)
	}
	return m, order, nil
}

func (p *cfgParser) yamlTable(i int, f *yamlTable, n *yaml.Node, seen map[string]int) (TableConfig, error) {
	path := fmt.Sprintf("tables[%d]", i)
	var tc TableConfig
	if n.Kind != yaml.MappingNode {
		return tc, p.yerrf(path, n, "a table must be a mapping, got %s", yamlDescribe(n))
	}
	line := n.Line
	if yamlAbsent(&f.Name) {
		return tc, p.errf(path+".name", line, "required")
	}
	name, err := p.ystring(&f.Name, path+".name")
	if err != nil {
		return tc, err
	}
	if name == "" {
		return tc, p.yerrf(path+".name", &f.Name, "must not be empty")
	}
	if j, dup := seen[name]; dup {
		return tc, p.yerrf(path+".name", &f.Name, "duplicate table name %q (also tables[%d])", name, j)
	}
	seen[name] = i

	var sig *tensorflowpb.StructuredValue
	if !yamlAbsent(&f.Signature) {
		if sig, err = p.ysignature(&f.Signature, path+".signature"); err != nil {
			return tc, err
		}
	}

	// The queue/stack shorthand.
	short, shortKey := &f.Queue, "queue"
	if yamlAbsent(short) {
		short, shortKey = &f.Stack, "stack"
	}
	if !yamlAbsent(short) {
		if shortKey == "queue" && !yamlAbsent(&f.Stack) {
			return tc, p.yerrf(path+".stack", &f.Stack, "cannot be combined with queue")
		}
		for _, other := range []struct {
			key string
			n   *yaml.Node
		}{
			{"sampler", &f.Sampler}, {"remover", &f.Remover}, {"max_size", &f.MaxSize},
			{"max_times_sampled", &f.MaxTimesSampled}, {"rate_limiter", &f.RateLimiter},
		} {
			if !yamlAbsent(other.n) {
				return tc, p.yerrf(path+"."+other.key, other.n, "cannot be combined with the %s shorthand, which sets sampler, remover, max_size, max_times_sampled and rate_limiter", shortKey)
			}
		}
		size, err := p.yint(short, path+"."+shortKey)
		if err != nil {
			return tc, err
		}
		if size < 1 {
			return tc, p.yerrf(path+"."+shortKey, short, "must be >= 1, got %d", size)
		}
		if shortKey == "queue" {
			tc = QueueTable(name, size)
		} else {
			tc = StackTable(name, size)
		}
		tc.Signature = sig
		return tc, nil
	}

	tc.Name = name
	tc.Signature = sig
	for _, s := range []struct {
		key  string
		n    *yaml.Node
		spec *selector.Spec
	}{{"sampler", &f.Sampler, &tc.Sampler}, {"remover", &f.Remover, &tc.Remover}} {
		if yamlAbsent(s.n) {
			return tc, p.errf(path+"."+s.key, line, "required (or use the queue or stack shorthand)")
		}
		if *s.spec, err = p.yselector(s.n, path+"."+s.key); err != nil {
			return tc, err
		}
	}
	if yamlAbsent(&f.MaxSize) {
		return tc, p.errf(path+".max_size", line, "required")
	}
	if tc.MaxSize, err = p.yint(&f.MaxSize, path+".max_size"); err != nil {
		return tc, err
	}
	if tc.MaxSize <= 0 {
		return tc, p.yerrf(path+".max_size", &f.MaxSize, "must be > 0, got %d", tc.MaxSize)
	}
	if !yamlAbsent(&f.MaxTimesSampled) {
		n, err := p.yint(&f.MaxTimesSampled, path+".max_times_sampled")
		if err != nil {
			return tc, err
		}
		if n < 0 || n > math.MaxInt32 {
			return tc, p.yerrf(path+".max_times_sampled", &f.MaxTimesSampled, "must be in [0, %d] (0 is unlimited), got %d", math.MaxInt32, n)
		}
		tc.MaxTimesSampled = int32(n)
	}
	if yamlAbsent(&f.RateLimiter) {
		return tc, p.errf(path+".rate_limiter", line, "required")
	}
	if tc.RateLimiter, err = p.yrateLimiter(&f.RateLimiter, path+".rate_limiter"); err != nil {
		return tc, err
	}
	return tc, nil
}

const wantSelector = "want fifo, lifo, uniform, min_heap, max_heap or {prioritized: {priority_exponent: X}}"

func (p *cfgParser) yselector(n *yaml.Node, path string) (selector.Spec, error) {
	n = yamlResolve(n)
	switch n.Kind {
	case yaml.ScalarNode:
		name := n.Value
		if name == "prioritized" {
			return selector.Spec{}, p.yerrf(path, n, "prioritized needs an exponent: write {prioritized: {priority_exponent: X}}")
		}
		k, err := selector.ParseKind(name)
		if err != nil {
			return selector.Spec{}, p.yerrf(path, n, "unknown selector %q; %s", name, wantSelector)
		}
		return selector.Spec{Kind: k}, nil
	case yaml.MappingNode:
		m, _, err := p.ymapping(n, path, "prioritized")
		if err != nil {
			return selector.Spec{}, err
		}
		pn := m["prioritized"]
		if pn == nil {
			return selector.Spec{}, p.yerrf(path, n, "empty mapping; %s", wantSelector)
		}
		pm, _, err := p.ymapping(pn, path+".prioritized", "priority_exponent")
		if err != nil {
			return selector.Spec{}, err
		}
		en := pm["priority_exponent"]
		if en == nil {
			return selector.Spec{}, p.yerrf(path+".prioritized.priority_exponent", pn, "required")
		}
		e, err := p.yfloat(en, path+".prioritized.priority_exponent")
		if err != nil {
			return selector.Spec{}, err
		}
		if r := checkExponent(e); r != "" {
			return selector.Spec{}, p.yerrf(path+".prioritized.priority_exponent", en, "%s", r)
		}
		return selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: e}, nil
	}
	return selector.Spec{}, p.yerrf(path, n, "got %s; %s", yamlDescribe(n), wantSelector)
}

var (
	rateLimiterForms   = []string{"min_size", "sample_to_insert_ratio", "queue", "stack"}
	rateLimiterGeneric = []string{"samples_per_insert", "min_size_to_sample", "min_diff", "max_diff"}
)

const wantRateLimiter = "want exactly one of {min_size: N}, {sample_to_insert_ratio: {...}}, {queue: N}, {stack: N} or the generic {samples_per_insert: X, min_size_to_sample: N, min_diff: X, max_diff: X}"

func (p *cfgParser) yrateLimiter(n *yaml.Node, path string) (RateLimiter, error) {
	var rl RateLimiter
	m, order, err := p.ymapping(n, path, append(append([]string{}, rateLimiterForms...), rateLimiterGeneric...)...)
	if err != nil {
		return rl, err
	}
	if len(order) == 0 {
		return rl, p.yerrf(path, n, "empty; %s", wantRateLimiter)
	}
	// Exactly one form: a named form alone, or only generic keys.
	first := order[0]
	firstGeneric := slices.Contains(rateLimiterGeneric, first)
	for _, k := range order[1:] {
		if !firstGeneric || !slices.Contains(rateLimiterGeneric, k) {
			return rl, p.yerrf(cfgJoinPath(path, k), m[k], "cannot be combined with %s; %s", first, wantRateLimiter)
		}
	}
	if firstGeneric {
		return p.yrateLimiterGeneric(m, n, path)
	}
	fp := cfgJoinPath(path, first)
	v := m[first]
	switch first {
	case "min_size", "queue", "stack":
		size, err := p.yint(v, fp)
		if err != nil {
			return rl, err
		}
		if size < 1 {
			return rl, p.yerrf(fp, v, "must be >= 1, got %d", size)
		}
		switch first {
		case "min_size":
			return MinSize(size), nil
		case "queue":
			return Queue(size), nil
		}
		return Stack(size), nil
	}
	return p.ySampleToInsertRatio(v, fp)
}

// yrateLimiterGeneric reads the generic form: all four fields required, the
// rules of Reverb's C++ RateLimiter.
func (p *cfgParser) yrateLimiterGeneric(m map[string]*yaml.Node, n *yaml.Node, path string) (RateLimiter, error) {
	var rl RateLimiter
	for _, k := range rateLimiterGeneric {
		if m[k] == nil {
			return rl, p.yerrf(cfgJoinPath(path, k), n, "required in the generic form (all of %s; use -.inf and .inf for no bounds)", strings.Join(rateLimiterGeneric, ", "))
		}
	}
	spi, err := p.yfloat(m["samples_per_insert"], path+".samples_per_insert")
	if err != nil {
		return rl, err
	}
	if r := checkSPI(spi); r != "" {
		return rl, p.yerrf(path+".samples_per_insert", m["samples_per_insert"], "%s", r)
	}
	minSize, err := p.yint(m["min_size_to_sample"], path+".min_size_to_sample")
	if err != nil {
		return rl, err
	}
	if minSize < 1 {
		return rl, p.yerrf(path+".min_size_to_sample", m["min_size_to_sample"], "must be >= 1, got %d", minSize)
	}
	minDiff, err := p.ydiff(m["min_diff"], path+".min_diff")
	if err != nil {
		return rl, err
	}
	maxDiff, err := p.ydiff(m["max_diff"], path+".max_diff")
	if err != nil {
		return rl, err
	}
	if minDiff > maxDiff {
		return rl, p.yerrf(path+".max_diff", m["max_diff"], "must be >= min_diff (%v), got %v", minDiff, maxDiff)
	}
	return RateLimiter{SamplesPerInsert: spi, MinSizeToSample: minSize, MinDiff: minDiff, MaxDiff: maxDiff}, nil
}

// ydiff reads a min_diff or max_diff: a number, not NaN; ±.inf become
// ±math.MaxFloat64.
func (p *cfgParser) ydiff(n *yaml.Node, path string) (float64, error) {
	v, err := p.yfloat(n, path)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) {
		return 0, p.yerrf(path, n, "must not be NaN")
	}
	return clampInf(v), nil
}

// ySampleToInsertRatio reads Reverb's Python SampleToInsertRatio, with its
// validation.
func (p *cfgParser) ySampleToInsertRatio(n *yaml.Node, path string) (RateLimiter, error) {
	var rl RateLimiter
	m, _, err := p.ymapping(n, path, "samples_per_insert", "min_size_to_sample", "error_buffer", "min_diff", "max_diff")
	if err != nil {
		return rl, err
	}
	for _, k := range []string{"samples_per_insert", "min_size_to_sample"} {
		if m[k] == nil {
			return rl, p.yerrf(cfgJoinPath(path, k), n, "required")
		}
	}
	spi, err := p.yfloat(m["samples_per_insert"], path+".samples_per_insert")
	if err != nil {
		return rl, err
	}
	if r := checkSPI(spi); r != "" {
		return rl, p.yerrf(path+".samples_per_insert", m["samples_per_insert"], "%s", r)
	}
	minSize, err := p.yint(m["min_size_to_sample"], path+".min_size_to_sample")
	if err != nil {
		return rl, err
	}
	if minSize < 1 {
		return rl, p.yerrf(path+".min_size_to_sample", m["min_size_to_sample"], "must be >= 1, got %d", minSize)
	}
	offset := float64(spi * float64(minSize)) // rounded first, as in Reverb (ratelimit.Limiter.Diff)

	var minDiff, maxDiff float64
	// Where to report a bad range: error_buffer, or max_diff / min_diff.
	rangePath, rangeNode := path+".max_diff", m["max_diff"]
	minPath, minNode := path+".min_diff", m["min_diff"]
	eb := m["error_buffer"]
	switch {
	case eb != nil && (m["min_diff"] != nil || m["max_diff"] != nil):
		k := "min_diff"
		if m[k] == nil {
			k = "max_diff"
		}
		return rl, p.yerrf(cfgJoinPath(path, k), m[k], "cannot be combined with error_buffer; give error_buffer, or min_diff and max_diff")
	case eb != nil:
		ebPath := path + ".error_buffer"
		rangePath, rangeNode, minPath, minNode = ebPath, eb, ebPath, eb
		if yamlResolve(eb).Kind == yaml.SequenceNode {
			// Python's error_buffer=(min_diff, max_diff).
			items := yamlResolve(eb).Content
			if len(items) != 2 {
				return rl, p.yerrf(ebPath, eb, "a list must be [min_diff, max_diff], got %d items", len(items))
			}
			if minDiff, err = p.ydiff(items[0], ebPath+"[0]"); err != nil {
				return rl, err
			}
			if maxDiff, err = p.ydiff(items[1], ebPath+"[1]"); err != nil {
				return rl, err
			}
		} else {
			e, err := p.yfloat(eb, ebPath)
			if err != nil {
				return rl, err
			}
			if math.IsNaN(e) || e < 0 {
				return rl, p.yerrf(ebPath, eb, "must be >= 0, got %v", e)
			}
			minDiff, maxDiff = clampInf(offset-e), clampInf(offset+e)
			if need := math.Max(1, spi); e < need {
				return rl, p.yerrf(ebPath, eb, "must be >= max(1, samples_per_insert) = %v, got %v (Reverb requires max_diff - min_diff >= 2*max(1, samples_per_insert))", need, e)
			}
		}
	default:
		for _, k := range []string{"min_diff", "max_diff"} {
			if m[k] == nil {
				return rl, p.yerrf(cfgJoinPath(path, k), n, "required: give error_buffer, or min_diff and max_diff")
			}
		}
		if minDiff, err = p.ydiff(m["min_diff"], path+".min_diff"); err != nil {
			return rl, err
		}
		if maxDiff, err = p.ydiff(m["max_diff"], path+".max_diff"); err != nil {
			return rl, err
		}
	}
	if need := 2 * math.Max(1, spi); maxDiff-minDiff < need {
		return rl, p.yerrf(rangePath, rangeNode, "max_diff - min_diff must be >= 2*max(1, samples_per_insert) = %v, got %v - %v = %v", need, maxDiff, minDiff, maxDiff-minDiff)
	}
	if minDiff > offset {
		return rl, p.yerrf(minPath, minNode, "min_diff must be <= samples_per_insert*min_size_to_sample = %v, got %v", offset, minDiff)
	}
	return RateLimiter{SamplesPerInsert: spi, MinSizeToSample: minSize, MinDiff: minDiff, MaxDiff: maxDiff}, nil
}

// numpyDTypes maps numpy dtype names to TensorFlow DataTypes.
var numpyDTypes = map[string]tensorflowpb.DataType{
	"bool":       tensorflowpb.DataType_DT_BOOL,
	"float16":    tensorflowpb.DataType_DT_HALF,
	"bfloat16":   tensorflowpb.DataType_DT_BFLOAT16,
	"float32":    tensorflowpb.DataType_DT_FLOAT,
	"float64":    tensorflowpb.DataType_DT_DOUBLE,
	"int8":       tensorflowpb.DataType_DT_INT8,
	"int16":      tensorflowpb.DataType_DT_INT16,
	"int32":      tensorflowpb.DataType_DT_INT32,
	"int64":      tensorflowpb.DataType_DT_INT64,
	"uint8":      tensorflowpb.DataType_DT_UINT8,
	"uint16":     tensorflowpb.DataType_DT_UINT16,
	"uint32":     tensorflowpb.DataType_DT_UINT32,
	"uint64":     tensorflowpb.DataType_DT_UINT64,
	"complex64":  tensorflowpb.DataType_DT_COMPLEX64,
	"complex128": tensorflowpb.DataType_DT_COMPLEX128,
	"string":     tensorflowpb.DataType_DT_STRING,
}

const wantDType = "bool, float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, complex64, complex128 or string"

// ysignature converts a YAML signature: a mapping with dtype is a tensor
// spec; a mapping whose only key is tuple, holding a list, is a tuple; other
// mappings are dicts; lists are lists.
func (p *cfgParser) ysignature(n *yaml.Node, path string) (*tensorflowpb.StructuredValue, error) {
	n = yamlResolve(n)
	switch n.Kind {
	case yaml.SequenceNode:
		lv := &tensorflowpb.ListValue{}
		for i, c := range n.Content {
			v, err := p.ysignature(c, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			lv.Values = append(lv.Values, v)
		}
		return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_ListValue{ListValue: lv}}, nil
	case yaml.MappingNode:
		m, order, err := p.ymapping(n, path)
		if err != nil {
			return nil, err
		}
		if _, leaf := m["dtype"]; leaf {
			return p.ytensorSpec(n, path)
		}
		if t := m["tuple"]; len(order) == 1 && t != nil && yamlResolve(t).Kind == yaml.SequenceNode {
			tv := &tensorflowpb.TupleValue{}
			for i, c := range yamlResolve(t).Content {
				v, err := p.ysignature(c, fmt.Sprintf("%s.tuple[%d]", path, i))
				if err != nil {
					return nil, err
				}
				tv.Values = append(tv.Values, v)
			}
			return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_TupleValue{TupleValue: tv}}, nil
		}
		dv := &tensorflowpb.DictValue{Fields: make(map[string]*tensorflowpb.StructuredValue, len(order))}
		for _, k := range order {
			v, err := p.ysignature(m[k], cfgKeyPath(path, k))
			if err != nil {
				return nil, err
			}
			dv.Fields[k] = v
		}
		return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_DictValue{DictValue: dv}}, nil
	}
	return nil, p.yerrf(path, n, "got %s; want a tensor spec {dtype: ..., shape: [...]}, a mapping, a list or {tuple: [...]}", yamlDescribe(n))
}

func (p *cfgParser) ytensorSpec(n *yaml.Node, path string) (*tensorflowpb.StructuredValue, error) {
	m, _, err := p.ymapping(n, path, "dtype", "shape", "name")
	if err != nil {
		return nil, err
	}
	spec := &tensorflowpb.TensorSpecProto{}
	dn := m["dtype"]
	dname, err := p.ystring(dn, path+".dtype")
	if err != nil {
		return nil, err
	}
	dt, ok := numpyDTypes[dname]
	if !ok {
		return nil, p.yerrf(path+".dtype", dn, "unknown dtype %q; want %s", dname, wantDType)
	}
	spec.Dtype = dt
	if nn := m["name"]; nn != nil && !yamlAbsent(nn) {
		if spec.Name, err = p.ystring(nn, path+".name"); err != nil {
			return nil, err
		}
	}
	spec.Shape = &tensorflowpb.TensorShapeProto{UnknownRank: true}
	if sn := m["shape"]; sn != nil && !yamlAbsent(sn) {
		sn = yamlResolve(sn)
		if sn.Kind != yaml.SequenceNode {
			return nil, p.yerrf(path+".shape", sn, "must be a list of dimension sizes (null or -1 for unknown) or null for unknown rank, got %s", yamlDescribe(sn))
		}
		spec.Shape = &tensorflowpb.TensorShapeProto{}
		for i, d := range sn.Content {
			dpath := fmt.Sprintf("%s.shape[%d]", path, i)
			size := int64(-1)
			if !yamlAbsent(d) {
				if size, err = p.yint(d, dpath); err != nil {
					return nil, err
				}
				if size < -1 {
					return nil, p.yerrf(dpath, d, "must be >= 0, or null or -1 for unknown, got %d", size)
				}
			}
			spec.Shape.Dim = append(spec.Shape.Dim, &tensorflowpb.TensorShapeProto_Dim{Size: size})
		}
	}
	return &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_TensorSpecValue{TensorSpecValue: spec}}, nil
}

// yamlSecurity decodes the tls block (cert_file, key_file,
// client_ca_file) and the auth block (token_file).
func (p *cfgParser) yamlSecurity(tlsNode, authNode *yaml.Node, cfg *Config) error {
	if !yamlAbsent(tlsNode) {
		m, _, err := p.ymapping(tlsNode, "tls", "cert_file", "key_file", "client_ca_file")
		if err != nil {
			return err
		}
		fields := []struct {
			key string
			dst *string
		}{{"cert_file", &cfg.TLS.CertFile}, {"key_file", &cfg.TLS.KeyFile}, {"client_ca_file", &cfg.TLS.ClientCAFile}}
		for _, f := range fields {
			if v, ok := m[f.key]; ok {
				if *f.dst, err = p.ystring(v, "tls."+f.key); err != nil {
					return err
				}
				// An empty client_ca_file would turn mutual TLS off
				// without a word (a template's unset variable).
				if *f.dst == "" {
					return p.yerrf("tls."+f.key, v, "must not be empty; leave the key out instead")
				}
			}
		}
		if cfg.TLS.CertFile == "" || cfg.TLS.KeyFile == "" {
			return p.yerrf("tls", tlsNode, "cert_file and key_file are both required")
		}
	}
	if !yamlAbsent(authNode) {
		m, _, err := p.ymapping(authNode, "auth", "token_file")
		if err != nil {
			return err
		}
		v, ok := m["token_file"]
		if !ok {
			return p.yerrf("auth", authNode, "token_file is required")
		}
		if cfg.Auth.TokenFile, err = p.ystring(v, "auth.token_file"); err != nil {
			return err
		}
		// An empty path would leave every call open without a word.
		if cfg.Auth.TokenFile == "" {
			return p.yerrf("auth.token_file", v, "must not be empty; leave the auth block out to serve without tokens")
		}
	}
	return nil
}
