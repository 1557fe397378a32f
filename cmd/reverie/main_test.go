package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

var binary string

// TestMain builds the reverie binary once; the tests run it as a user would.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reverie-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "reverie")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type proc struct {
	cmd  *exec.Cmd
	addr string
	logs chan string
	done chan error
}

var addrRE = regexp.MustCompile(`addr=\S*:(\d+)`)

// serve starts "reverie serve args..." and waits for it to report its port.
func serve(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--listen", "localhost:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, logs: make(chan string, 1000), done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if m := addrRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "reverie serving") {
				ready <- "127.0.0.1:" + m[1]
			}
			select {
			case p.logs <- line:
			default:
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
	})
	select {
	case p.addr = <-ready:
	case err := <-p.done:
		t.Fatalf("reverie exited early: %v\n%s", err, drain(p.logs))
	case <-time.After(20 * time.Second):
		t.Fatalf("reverie did not report its address\n%s", drain(p.logs))
	}
	return p
}

func drain(ch chan string) string {
	var b strings.Builder
	for {
		select {
		case l := <-ch:
			b.WriteString(l + "\n")
		default:
			return b.String()
		}
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (p *proc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("reverie exited with %v after %v\n%s", err, sig, drain(p.logs))
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("reverie did not stop after %v", sig)
	}
}

// TestServeReverbTextproto is the acceptance check of the core server: the
// Reverb README's reverb_server example serves its table as configured.
func TestServeReverbTextproto(t *testing.T) {
	p := serve(t, "--config", "../../examples/config/reverb_server.textproto")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := reverbpb.NewReverbServiceClient(dial(t, p.addr)).ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.GetTableInfo()) != 1 {
		t.Fatalf("tables: %v", info.GetTableInfo())
	}
	ti := info.GetTableInfo()[0]
	rl := ti.GetRateLimiterInfo()
	if ti.GetName() != "my_table" || !ti.GetSamplerOptions().GetFifo() || !ti.GetRemoverOptions().GetFifo() ||
		ti.GetMaxSize() != 200 || ti.GetMaxTimesSampled() != 5 || rl.GetMinSizeToSample() != 1 ||
		rl.GetSamplesPerInsert() != 1 || rl.GetMinDiff() != -math.MaxFloat64 || rl.GetMaxDiff() != math.MaxFloat64 {
		t.Fatalf("table info does not match the config: %v", ti)
	}
	p.stop(t, syscall.SIGTERM)
}

func TestServeDefaults(t *testing.T) {
	p := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := reverbpb.NewReverbServiceClient(dial(t, p.addr)).ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ti := info.GetTableInfo()[0]
	if ti.GetName() != "replay" || !ti.GetSamplerOptions().GetUniform() || !ti.GetRemoverOptions().GetFifo() ||
		ti.GetMaxSize() != 1_000_000 || ti.GetRateLimiterInfo().GetMinSizeToSample() != 1 {
		t.Fatalf("default table: %v", ti)
	}
	p.stop(t, syscall.SIGINT)
}

func TestServeYAMLAndUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "r.sock")
	cmd := exec.Command(binary, "serve", "--config", "../../examples/config/reverie.yaml", "--listen", "unix://"+sock)
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	conn := dial(t, "unix://"+sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := reverbpb.NewReverbServiceClient(conn).ServerInfo(ctx, &reverbpb.ServerInfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	if len(info.GetTableInfo()) < 2 {
		t.Fatalf("tables: %v", info.GetTableInfo())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
}

// TestReflection resolves ServerInfo through server reflection, as grpcurl
// does: every file the service needs must be served.
func TestReflection(t *testing.T) {
	p := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := reflectionpb.NewServerReflectionClient(dial(t, p.addr)).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, ","), "deepmind.reverb.ReverbService") {
		t.Fatalf("services: %v", names)
	}
	resp = ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "deepmind.reverb.ReverbService",
	}})
	fds := &descriptorpb.FileDescriptorSet{}
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, fd); err != nil {
			t.Fatal(err)
		}
		fds.File = append(fds.File, fd)
	}
	files, err := protodesc.NewFiles(fds)
	if err != nil {
		t.Fatalf("reflection files do not resolve: %v", err)
	}
	if _, err := files.FindDescriptorByName("deepmind.reverb.ReverbService.ServerInfo"); err != nil {
		t.Fatal(err)
	}
	if _, err := files.FindDescriptorByName("tensorflow.StructuredValue"); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	p.stop(t, syscall.SIGTERM)
}

func TestBadConfigDoesNotStart(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct{ file, body, want string }{
		"negative max_size": {"bad.yaml", "tables:\n  - name: t\n    sampler: uniform\n    remover: fifo\n    max_size: -5\n    rate_limiter: {min_size: 1}\n", "max_size"},
		"false fifo":        {"bad.textproto", "tables { table_name: \"t\" sampler { fifo: false } remover { fifo: true } max_size: 10 rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 min_diff: 0 max_diff: 10 } }", "fifo"},
		"unknown extension": {"bad.json", "{}", ".json"},
		"missing file":      {"", "", "no such file"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, "missing.yaml")
			if tc.file != "" {
				path = filepath.Join(dir, tc.file)
				if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(binary, "serve", "--listen", "localhost:0", "--config", path)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not mention %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	out, err := exec.Command(binary, "frobnicate").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "unknown command") {
		t.Fatalf("unknown command: %v\n%s", err, out)
	}
}
