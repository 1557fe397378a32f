package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startRaw serves the raw protocol on a loopback port with the rings of
// spec until the test ends.
func startRaw(t *testing.T, spec string, ackEvery uint64) (string, rings) {
	t.Helper()
	rs, err := parseRings(spec, false)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveRaw(lis, rs, ackEvery) }()
	t.Cleanup(func() {
		lis.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("serveRaw: %v", err)
		}
	})
	return lis.Addr().String(), rs
}

// Every payload a raw insert flow sends lands in the ring and is
// acknowledged, the last ones when the client closes its side, though the
// server acknowledges only every 7.
func TestRawInsertFillsRing(t *testing.T) {
	addr, rs := startRaw(t, "100:10", 7)
	ctx, progress := loadWindow(t, 200*time.Millisecond, 1)
	c := &loadConfig{addr: addr, payload: 100, maxInFlight: 16, progress: progress[0]}
	lat, err := rawUpClient(ctx, c, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) == 0 {
		t.Fatal("no payload acknowledged")
	}
	r := rs[100]
	if got := r.next.Load(); got != uint64(len(lat)) {
		t.Fatalf("the ring took %d payloads, the client saw %d acknowledged", got, len(lat))
	}
	sent := map[string]bool{}
	for i := range 8 {
		sent[string(randomBytes(100, 3*100+uint64(i)))] = true
	}
	for i := range min(len(lat), 10) {
		if slot := r.buf[i*100 : (i+1)*100]; !sent[string(slot)] {
			t.Fatalf("slot %d holds bytes the client did not send", i)
		}
	}
}

// A raw sample response is the requested number of ring slots, whole.
func TestRawSampleFromRing(t *testing.T) {
	addr, rs := startRaw(t, "64:5", 1)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := binary.LittleEndian.AppendUint32([]byte{'D'}, 64)
	req = binary.LittleEndian.AppendUint32(req, 3)
	if _, err := conn.Write(req); err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, 3*64)
	if _, err := io.ReadFull(conn, resp); err != nil {
		t.Fatal(err)
	}
	r := rs[64]
	for k := range 3 {
		got := resp[k*64 : (k+1)*64]
		found := false
		for i := range r.slots {
			found = found || bytes.Equal(got, r.buf[i*64:(i+1)*64])
		}
		if !found {
			t.Fatalf("payload %d of the response is no slot of the ring", k)
		}
	}

	ctx, progress := loadWindow(t, 100*time.Millisecond, 1)
	c := &loadConfig{addr: addr, payload: 64, inFlight: 4, progress: progress[0]}
	if lat, err := rawDownClient(ctx, c); err != nil || len(lat) == 0 {
		t.Fatalf("rawDownClient: %d takes, %v", len(lat), err)
	}
}

// A connection that breaks the protocol is closed; the server goes on
// serving others.
func TestRawBadInput(t *testing.T) {
	addr, _ := startRaw(t, "", 1)
	for name, msg := range map[string][]byte{
		"unknown flow":       {'X'},
		"zero payloads":      {'D', 8, 0, 0, 0, 0, 0, 0, 0},
		"oversized response": {'D', 0, 0, 0, 0x40, 4, 0, 0, 0},
		"oversized payload":  {'U', 1, 0, 0, 0x40},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write(msg); err != nil {
			t.Fatal(err)
		}
		if n, err := conn.Read(make([]byte, 8)); err != io.EOF {
			t.Errorf("%s: read %d bytes, %v; want the connection closed", name, n, err)
		}
		conn.Close()
	}
	ctx, progress := loadWindow(t, 50*time.Millisecond, 1)
	c := &loadConfig{addr: addr, payload: 10, inFlight: 2, progress: progress[0]}
	if lat, err := rawDownClient(ctx, c); err != nil || len(lat) == 0 {
		t.Fatalf("after the bad connections: %d takes, %v", len(lat), err)
	}
}

// The gRPC echo with --ack-every acknowledges in batches, and upClient
// counts every payload once.
func TestUpAckEvery(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodecV2(newBytesCodec(nil)))
	s.RegisterService(&serviceDesc, &echoServer{rings: rings{}, ackEvery: 5})
	go s.Serve(lis)
	defer s.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.ForceCodecV2(newBytesCodec(nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, progress := loadWindow(t, 100*time.Millisecond, 1)
	c := &loadConfig{payload: 50, maxInFlight: 12, progress: progress[0]}
	lat, err := upClient(ctx, cc, c, 1)
	if err != nil || len(lat) == 0 {
		t.Fatalf("upClient: %d acknowledged, %v", len(lat), err)
	}
}
