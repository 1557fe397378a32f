package h2grpc

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// rawClient speaks HTTP/2 frames to the server directly, for what gRPC
// clients never send.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	fr *http2.Framer
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	c := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *rawClient) headers(id uint32, path string, end bool) {
	c.t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: end}); err != nil {
		c.t.Fatal(err)
	}
}

// trailers ends stream id with a header block of fields.
func (c *rawClient) trailers(id uint32, fields ...[2]string) {
	c.t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: true}); err != nil {
		c.t.Fatal(err)
	}
}

// until reads frames until want returns true, and fails the test if the
// connection ends first.
func (c *rawClient) until(what string, want func(http2.Frame) bool) {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", what, err)
		}
		if want(f) {
			return
		}
	}
}

// reset reads frames until RST_STREAM with code on stream id, and fails
// the test if the connection ends first.
func (c *rawClient) reset(what string, id uint32, code http2.ErrCode) {
	c.t.Helper()
	c.until(what, func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == id && r.ErrCode == code
	})
}

func (c *rawClient) goAway(code http2.ErrCode) {
	c.t.Helper()
	c.until("GOAWAY "+code.String(), func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		if ok && g.ErrCode != code {
			c.t.Fatalf("GOAWAY %v (%q), want %v", g.ErrCode, g.DebugData(), code)
		}
		return ok
	})
	// Then the server closes the connection.
	for {
		if _, err := c.fr.ReadFrame(); err != nil {
			if !errors.Is(err, io.EOF) {
				c.t.Fatalf("after GOAWAY: %v, want the connection closed", err)
			}
			return
		}
	}
}

func TestProtocolErrors(t *testing.T) {
	_, _, addr := start(t, Options{MaxHeaderBlock: 1024})
	t.Run("DATA on an idle stream", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.fr.WriteData(5, false, []byte("x"))
		c.goAway(http2.ErrCodeProtocol)
	})
	t.Run("frame over 16 KiB", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.fr.WriteRawFrame(http2.FrameData, 0, 1, make([]byte, 20000))
		c.goAway(http2.ErrCodeFrameSize)
	})
	t.Run("header block over the limit", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: make([]byte, 900)})
		c.fr.WriteContinuation(1, true, make([]byte, 900))
		c.goAway(http2.ErrCodeEnhanceYourCalm)
	})
	t.Run("bad HPACK", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		c.goAway(http2.ErrCodeCompression)
	})
	t.Run("even stream", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.headers(2, "/"+svcName+"/Echo", true)
		c.goAway(http2.ErrCodeProtocol)
	})
	t.Run("stream id below the last opened", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.headers(5, "/"+svcName+"/Block", false)
		c.headers(3, "/"+svcName+"/Echo", true)
		c.goAway(http2.ErrCodeProtocol)
	})
	t.Run("WINDOW_UPDATE on an idle stream", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.fr.WriteWindowUpdate(3, 100)
		c.goAway(http2.ErrCodeProtocol)
	})
	t.Run("RST_STREAM on an even stream", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.headers(1, "/"+svcName+"/Block", false)
		c.fr.WriteRSTStream(2, http2.ErrCodeCancel)
		c.goAway(http2.ErrCodeProtocol)
	})
	t.Run("SETTINGS_ENABLE_PUSH of 2", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 2})
		c.goAway(http2.ErrCodeProtocol)
	})
	t.Run("DATA on a closed stream after END_STREAM", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.headers(1, "/"+svcName+"/Nope", true) // answered and closed at once
		c.until("the answer", func(f http2.Frame) bool {
			h, ok := f.(*http2.MetaHeadersFrame)
			return ok && h.StreamID == 1 && h.StreamEnded()
		})
		c.fr.WriteData(1, false, []byte("x"))
		c.goAway(http2.ErrCodeStreamClosed)
	})
	t.Run("SETTINGS that takes a stream's window over 2^31-1", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.headers(1, "/"+svcName+"/Block", false)
		c.fr.WriteWindowUpdate(1, 1<<31-1-65535) // the stream's window at the maximum
		c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65536})
		c.goAway(http2.ErrCodeFlowControl)
	})
	t.Run("window overflow", func(t *testing.T) {
		c := dialRaw(t, addr)
		c.fr.WriteWindowUpdate(0, 1<<31-1)
		c.goAway(http2.ErrCodeFlowControl)
	})
	t.Run("not HTTP/2", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := io.Copy(io.Discard, nc); err != nil {
			t.Fatalf("want the connection closed, got %v", err)
		}
	})
	// After all that, the server serves.
	c := dialRaw(t, addr)
	c.fr.WritePing(false, [8]byte{1, 2, 3})
	c.until("PING ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data == [8]byte{1, 2, 3}
	})
}

func TestStreamLimit(t *testing.T) {
	srv, impl, addr := start(t, Options{MaxConcurrentStreams: 1})
	c := dialRaw(t, addr)
	c.headers(1, "/"+svcName+"/Block", false)
	c.headers(3, "/"+svcName+"/Block", false)
	c.until("RST_STREAM REFUSED_STREAM on stream 3", func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		if ok && (r.StreamID != 3 || r.ErrCode != http2.ErrCodeRefusedStream) {
			t.Fatalf("RST_STREAM %v on stream %d", r.ErrCode, r.StreamID)
		}
		return ok
	})
	// Resetting stream 1 ends its handler; then a new stream is served.
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	if err := <-impl.ctxErrs; err == nil {
		t.Fatal("reset stream's handler saw no error")
	}
	// Its handler's count drops as it returns, just after.
	conn := connOf(t, srv)
	for deadline := time.Now().Add(10 * time.Second); !conn.locked(func() bool { return conn.running.Load() == 0 && len(conn.streams) == 0 }); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reset stream's handler is still counted")
		}
	}
	c.headers(5, "/"+svcName+"/Echo", false)
	c.fr.WriteData(5, true, []byte{0, 0, 0, 0, 0})
	c.until("stream 5's response", func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		if ok && h.StreamID == 5 && h.StreamEnded() {
			if got := h.PseudoValue("status"); got != "" {
				return false // headers of a message; the trailers follow
			}
			if st := h.Fields[0]; st.Name != "grpc-status" || st.Value != "0" {
				t.Fatalf("stream 5 ended with %v", h.Fields)
			}
			return true
		}
		return false
	})
	<-impl.md
	<-impl.peers
}

func TestRequestHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields [][2]string
		http   string
		grpc   string
	}{
		{"GET", [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/" + svcName + "/Echo"}, {"content-type", "application/grpc"}}, "405", "13"},
		{"not gRPC", [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + svcName + "/Echo"}, {"content-type", "text/plain"}}, "415", "13"},
		{"gzip", [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + svcName + "/Echo"}, {"content-type", "application/grpc"}, {"grpc-encoding", "gzip"}}, "200", "12"},
		{"bad timeout", [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + svcName + "/Echo"}, {"content-type", "application/grpc"}, {"grpc-timeout", "1x"}}, "400", "13"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, addr := start(t, Options{})
			c := dialRaw(t, addr)
			var buf bytes.Buffer
			enc := hpack.NewEncoder(&buf)
			for _, f := range tc.fields {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: true})
			c.until("the response", func(f http2.Frame) bool {
				h, ok := f.(*http2.MetaHeadersFrame)
				if !ok {
					return false
				}
				var got string
				for _, hf := range h.Fields {
					if hf.Name == "grpc-status" {
						got = hf.Value
					}
				}
				if h.PseudoValue("status") != tc.http || got != tc.grpc || !h.StreamEnded() {
					t.Fatalf("got :status %s grpc-status %s (%v), want %s and %s", h.PseudoValue("status"), got, h.Fields, tc.http, tc.grpc)
				}
				return true
			})
		})
	}
}

func TestEncodeMessage(t *testing.T) {
	for in, want := range map[string]string{
		"":               "",
		"plain text":     "plain text",
		"100%":           "100%25",
		"é\n":            "%C3%A9%0A",
		"a\x00b\x7fc~ d": "a%00b%7Fc~ d",
	} {
		if got := encodeMessage(in); got != want {
			t.Errorf("encodeMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"1S": time.Second, "250m": 250 * time.Millisecond, "3u": 3 * time.Microsecond, "7n": 7, "2M": 2 * time.Minute, "99999999H": 1<<63 - 1} {
		if got, err := parseTimeout(in); err != nil || got != want {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "S", "1", "1s", "-1S", "123456789S", "1.5S"} {
		if _, err := parseTimeout(in); err == nil {
			t.Errorf("parseTimeout(%q) succeeded", in)
		}
	}
}

// TestHeaderBomb sends a small header block that decodes to far more than
// the limit, by naming one large dynamic-table entry many times.
func TestHeaderBomb(t *testing.T) {
	_, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + svcName + "/Echo"}, {"content-type", "application/grpc"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	big := hpack.HeaderField{Name: "x-big", Value: string(bytes.Repeat([]byte("a"), 3000))}
	for range 100 {
		enc.WriteField(big) // the first adds it to the table, the rest name it
	}
	if buf.Len() > 8<<10 {
		t.Fatalf("the block is %d bytes; the test wants it small", buf.Len())
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: true})
	c.goAway(http2.ErrCodeEnhanceYourCalm)
}

// TestStopDuringHandshake checks that Stop does not wait for a client that
// connected and never finished its TLS handshake.
func TestStopDuringHandshake(t *testing.T) {
	cert, _ := selfSigned(t)
	srv, _, addr := start(t, Options{Creds: credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	time.Sleep(50 * time.Millisecond) // accepted, waiting for a ClientHello
	t0 := time.Now()
	srv.Stop()
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("Stop took %v with a handshake pending", d)
	}
}

// TestKeepaliveEnforcement: PINGs sooner than KeepaliveMinTime apart, with
// nothing sent between them, end the connection at the third strike, as
// gRPC-Go's policy does; PINGs spaced out, or answered by data, do not.
func TestKeepaliveEnforcement(t *testing.T) {
	_, _, addr := start(t, Options{KeepaliveMinTime: 200 * time.Millisecond})
	c := dialRaw(t, addr)
	for i := range 3 {
		c.fr.WritePing(false, [8]byte{byte(i)})
		time.Sleep(300 * time.Millisecond)
	}
	c.until("the third ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data[0] == 2
	})
	// Four PINGs in one write, so that they reach the server together: a
	// client stalled between writes (a loaded machine) could otherwise
	// space them past KeepaliveMinTime.
	var pings bytes.Buffer
	fr := http2.NewFramer(&pings, nil)
	for i := range 4 {
		fr.WritePing(false, [8]byte{byte(10 + i)})
	}
	if _, err := c.nc.Write(pings.Bytes()); err != nil {
		t.Fatal(err)
	}
	c.goAway(http2.ErrCodeEnhanceYourCalm)
}

// TestSettingsAckedAtOnce: a SETTINGS frame on an idle connection is
// acknowledged without waiting for other frames to write (h2spec found
// the acknowledgement waiting for the next write).
func TestSettingsAckedAtOnce(t *testing.T) {
	_, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	c.until("the server's SETTINGS and the ack of the client's", func(f http2.Frame) bool {
		s, ok := f.(*http2.SettingsFrame)
		return ok && s.IsAck()
	})
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 16})
	c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	c.until("the ack of a second SETTINGS", func(f http2.Frame) bool {
		s, ok := f.(*http2.SettingsFrame)
		return ok && s.IsAck()
	})
}

// TestMalformedRequests: a malformed header list is a stream error
// (RST_STREAM PROTOCOL_ERROR), and the connection serves on. So are a
// PRIORITY frame of the wrong size and a WINDOW_UPDATE of 0 on a stream.
func TestMalformedRequests(t *testing.T) {
	_, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	base := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + svcName + "/Echo"}, {"content-type", "application/grpc"}}
	cases := [][][2]string{
		append([][2]string{{":path", "/x/Y"}}, base...),                      // :path twice
		append(append([][2]string{}, base...), [2]string{":authority", "x"}), // pseudo after regular
		append(append([][2]string{}, base...), [2]string{"X-Upper", "1"}),
		append(append([][2]string{}, base...), [2]string{"connection", "close"}),
		append(append([][2]string{}, base...), [2]string{"te", "gzip"}),
		append([][2]string{{":status", "200"}}, base...),
		base[1:], // no :method
		append([][2]string{base[0]}, base[2:]...),               // no :scheme
		append(append([][2]string{}, base[:2]...), base[3:]...), // no :path
		append(append([][2]string{}, base[:2]...), [2]string{":path", ""}, base[3]),
	}
	id := uint32(1)
	for i, fields := range cases {
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for _, f := range fields {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: true})
		want := id
		c.until(fmt.Sprintf("case %d: RST_STREAM PROTOCOL_ERROR on stream %d", i, want), func(f http2.Frame) bool {
			r, ok := f.(*http2.RSTStreamFrame)
			if ok && (r.StreamID != want || r.ErrCode != http2.ErrCodeProtocol) {
				t.Fatalf("case %d: RST_STREAM %v on stream %d", i, r.ErrCode, r.StreamID)
			}
			if h, isH := f.(*http2.MetaHeadersFrame); isH && h.StreamID == want {
				t.Fatalf("case %d: answered with headers %v", i, h.Fields)
			}
			return ok
		})
		id += 2
	}
	c.fr.WriteRawFrame(http2.FramePriority, 0, id, []byte{0, 0, 0})
	c.reset("RST_STREAM FRAME_SIZE_ERROR for a short PRIORITY", id, http2.ErrCodeFrameSize)
	c.headers(id+2, "/"+svcName+"/Block", false)
	c.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, id+2, []byte{0, 0, 0, 0})
	c.reset("RST_STREAM PROTOCOL_ERROR for a WINDOW_UPDATE of 0", id+2, http2.ErrCodeProtocol)
	id += 4
	c.fr.WritePriority(id, http2.PriorityParam{StreamDep: id})
	c.reset("RST_STREAM PROTOCOL_ERROR for a stream depending on itself", id, http2.ErrCodeProtocol)
	// DATA after the client's END_STREAM on a stream still open, and
	// after its RST_STREAM: stream errors.
	id += 2
	c.headers(id, "/"+svcName+"/Block", true)
	c.fr.WriteData(id, false, []byte("x"))
	c.reset("RST_STREAM STREAM_CLOSED for DATA after END_STREAM", id, http2.ErrCodeStreamClosed)
	id += 2
	c.headers(id, "/"+svcName+"/Block", true)
	c.headers(id, "/"+svcName+"/Block", true) // the same stream again
	c.reset("RST_STREAM STREAM_CLOSED for HEADERS after END_STREAM", id, http2.ErrCodeStreamClosed)
	id += 2
	c.headers(id, "/"+svcName+"/Block", false)
	c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	c.fr.WriteData(id, false, []byte("x"))
	c.reset("RST_STREAM STREAM_CLOSED for DATA after RST_STREAM", id, http2.ErrCodeStreamClosed)
	// Trailers with a pseudo-header on an open stream: a stream error.
	id += 2
	c.headers(id, "/"+svcName+"/Block", false)
	c.trailers(id, [2]string{":status", "200"})
	c.reset("RST_STREAM PROTOCOL_ERROR for a pseudo-header in trailers", id, http2.ErrCodeProtocol)
	// DATA and trailers on a stream the server ended while the client's
	// side was open may have been on their way: they are ignored, not an
	// error (RFC 9113, 5.1). Before, the trailers ended the connection.
	id += 2
	c.headers(id, "/"+svcName+"/Nope", false)
	c.reset("the answer", id, http2.ErrCodeNo)
	c.fr.WriteData(id, false, []byte("x"))
	c.trailers(id, [2]string{"x-trailer", "1"})
	// Malformed trailers on such a stream are still a stream error.
	id += 2
	c.headers(id, "/"+svcName+"/Nope", false)
	c.reset("the answer", id, http2.ErrCodeNo)
	c.trailers(id, [2]string{":path", "/"})
	c.reset("RST_STREAM PROTOCOL_ERROR for a pseudo-header in trailers", id, http2.ErrCodeProtocol)
	// The connection serves on.
	c.fr.WritePing(false, [8]byte{7})
	c.until("PING ack", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data[0] == 7
	})
}

// TestSelfDependentHeaders: HEADERS making its stream depend on itself is
// a stream error, and its header block is still decoded, so that the
// client's next request, which refers to entries the block added to the
// HPACK table, is understood.
func TestSelfDependentHeaders(t *testing.T) {
	_, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	block := func(path string) []byte {
		buf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {"content-type", "application/grpc"}, {"x-first", "kept"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return bytes.Clone(buf.Bytes())
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block("/" + svcName + "/Echo"), EndHeaders: true, EndStream: true, Priority: http2.PriorityParam{StreamDep: 1}})
	c.reset("RST_STREAM PROTOCOL_ERROR on stream 1", 1, http2.ErrCodeProtocol)
	// The same fields again, now as references to the table.
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block("/" + svcName + "/Echo"), EndHeaders: true})
	c.fr.WriteData(3, true, []byte{0, 0, 0, 0, 0}) // an empty message
	c.until("the answer on stream 3", func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		if ok && h.StreamID == 3 && h.StreamEnded() {
			if got := h.PseudoValue("status"); got != "" {
				t.Fatalf("trailers-only answer with :status %q: %v", got, h.Fields)
			}
			for _, f := range h.Fields {
				if f.Name == "grpc-status" && f.Value != "0" {
					t.Fatalf("grpc-status %s: %v", f.Value, h.Fields)
				}
			}
			return true
		}
		return false
	})
}

// A method whose client sends one message (unary here; server-streaming
// methods take the same path) that gets two fails with gRPC-Go's status,
// and its handler does not run; the own transport used to run it on the
// first and answer OK (found by review). The same frames go to gRPC-Go's
// server for comparison.
func TestOneRequestMethodsRefuseASecond(t *testing.T) {
	_, _, own := start(t, Options{})
	gs := grpc.NewServer()
	gs.RegisterService(&svcDesc, newSvc())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	msg := func(b byte) []byte { return []byte{0, 0, 0, 0, 3, 0x0a, 1, b} } // BytesValue{value: b}
	for _, method := range []string{"Echo"} {
		for name, addr := range map[string]string{"own": own, "gRPC-Go": lis.Addr().String()} {
			c := dialRaw(t, addr)
			c.headers(1, "/"+svcName+"/"+method, false)
			if err := c.fr.WriteData(1, false, msg('a')); err != nil {
				t.Fatal(err)
			}
			if err := c.fr.WriteData(1, true, msg('b')); err != nil {
				t.Fatal(err)
			}
			var got string
			c.until("the trailers", func(f http2.Frame) bool {
				h, ok := f.(*http2.MetaHeadersFrame)
				if !ok || !h.StreamEnded() {
					return false
				}
				got = h.PseudoValue("status") + " grpc-status=" + fieldOf(h, "grpc-status") + " " + fieldOf(h, "grpc-message")
				return true
			})
			if !bytes.Contains([]byte(got), []byte("grpc-status=13 cardinality violation: received multiple request messages")) {
				t.Errorf("%s, %s with two requests: %s", name, method, got)
			}
		}
	}
}

func fieldOf(h *http2.MetaHeadersFrame, name string) string {
	for _, f := range h.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// A call's grpc-timeout resets its stream when it passes, as gRPC-Go's
// does, even when the handler's status waits behind answers the client
// grants no window for: the stream used to stay, holding its slot and its
// queued answers, for as long as the client kept the connection (found by
// review).
func TestDeadlineResetsTheStream(t *testing.T) {
	srv, _, addr := start(t, Options{})
	c := dialRaw(t, addr)
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/" + svcName + "/Flood"},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"grpc-timeout", "200m"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: buf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	// The client reads the first 64 KiB and grants no more window.
	c.reset("RST_STREAM CANCEL at the deadline", 1, http2.ErrCodeCancel)
	cn := connOf(t, srv)
	var n int
	cn.locked(func() bool { n = len(cn.streams); return true })
	if n != 0 {
		t.Fatalf("the server still holds %d streams after the deadline", n)
	}
}
