package h2grpc

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// FuzzConn feeds a connection arbitrary bytes after the client preface.
// Whatever they are, the server must not panic, must end the connection
// once the client goes, and must leave no goroutine behind (TestMain's
// goleak). `go test -fuzz FuzzConn ./server/h2grpc` explores further; the
// seeds run with every `go test`.
func FuzzConn(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		srv := NewServer(Options{MaxConcurrentStreams: 8})
		srv.RegisterService(&svcDesc, newFuzzSvc())
		client, server := net.Pipe()
		drained := make(chan struct{})
		go func() { io.Copy(io.Discard, client); close(drained) }()
		done := make(chan error, 1)
		go func() { done <- newConn(srv, server, nil).serve() }()
		client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(client, http2.ClientPreface)
		client.Write(in)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not end after the client closed it")
		}
		<-drained
	})
}

// newFuzzSvc is the test service with its recording channels large enough
// that no handler blocks on them.
func newFuzzSvc() *svc {
	s := newSvc()
	s.ctxErrs, s.deadline, s.md, s.peers = make(chan error, 1024), make(chan time.Time, 1024), make(chan metadata.MD, 1024), make(chan *peer.Peer, 1024)
	return s
}

// fuzzSeeds are frame sequences a client might send: calls of each kind,
// and some of the errors the protocol tests cover.
func fuzzSeeds() [][]byte {
	var out [][]byte
	frames := func(write func(fr *http2.Framer, hdr func(id uint32, path string, end bool))) []byte {
		var buf bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		hdr := func(id uint32, path string, end bool) {
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {"content-type", "application/grpc"}, {"grpc-timeout", "1S"}} {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: end})
		}
		write(fr, hdr)
		return buf.Bytes()
	}
	msg := func(b []byte) []byte { // a gRPC message holding a BytesValue of b
		m := append([]byte{0x0a, byte(len(b))}, b...)
		return append([]byte{0, 0, 0, 0, byte(len(m))}, m...)
	}
	out = append(out,
		frames(func(fr *http2.Framer, hdr func(uint32, string, bool)) {
			hdr(1, "/"+svcName+"/Echo", false)
			fr.WriteData(1, true, msg([]byte("hello")))
		}),
		frames(func(fr *http2.Framer, hdr func(uint32, string, bool)) {
			hdr(1, "/"+svcName+"/Chat", false)
			fr.WriteData(1, false, msg([]byte("a")))
			fr.WriteData(1, false, msg([]byte("boom"))[:4])
			fr.WriteRSTStream(1, http2.ErrCodeCancel)
			hdr(3, "/"+svcName+"/Block", false)
			fr.WritePing(false, [8]byte{1})
			fr.WriteWindowUpdate(0, 1000)
			fr.WriteWindowUpdate(3, 1000)
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		}),
		frames(func(fr *http2.Framer, hdr func(uint32, string, bool)) {
			hdr(1, "/"+svcName+"/Flood", false)
			fr.WriteData(1, true, msg(nil))
			hdr(3, "/nope/Nope", true)
			fr.WriteData(5, false, []byte{1, 2, 3})
		}),
		[]byte{0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		[]byte("GET / HTTP/1.1\r\n\r\n"),
	)
	return out
}
