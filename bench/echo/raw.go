package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// With --raw, `echo serve` and `echo load` move the same bytes over plain
// TCP: no gRPC, no HTTP/2 and no protobuf, only a length before each
// payload. Holding a table (--rings), the raw server is the floor of any
// transport on this machine: it reads each inserted payload from the
// socket straight into its ring slot (the kernel's copy is the only one),
// and writes sample responses from the ring with one writev (again only
// the kernel's copy). It is a measuring stick, not a protocol anyone
// should speak.
//
// A connection's first byte picks its flow:
//
//	'U' insert: the client sends items, each a 4-byte little-endian
//	    length and the payload. The server answers with the 8-byte
//	    little-endian count of items read so far after every --ack-every
//	    items, and once more when the client has closed its side.
//	'D' sample: the client sends requests of 8 bytes, the payload size and
//	    the number of payloads (4 bytes each, little-endian); the server
//	    answers each with that many payloads of that size, back to back,
//	    picked from the ring of that size (or, with none, one cached
//	    random payload repeated).
//
// Anything else closes the connection.

// rawMaxResponse bounds a sample response (payload size times count), so
// that a bad request cannot make the server allocate without limit.
const rawMaxResponse = 1 << 30

// serveRaw accepts connections on lis until it fails (when lis is closed)
// and serves each on its own goroutine.
func serveRaw(lis net.Listener, rs rings, ackEvery uint64) error {
	for {
		c, err := lis.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			_ = handleRaw(c, rs, ackEvery) // a broken connection is the client's to report
		}()
	}
}

// handleRaw serves one connection.
func handleRaw(c net.Conn, rs rings, ackEvery uint64) error {
	// Small, so that a large payload is read mostly straight into its
	// slot: bufio reads past its buffer when the rest of a read is at
	// least the buffer's size.
	br := bufio.NewReaderSize(c, 4096)
	kind, err := br.ReadByte()
	if err != nil {
		return err
	}
	switch kind {
	case 'U':
		return rawUp(c, br, rs, ackEvery)
	case 'D':
		return rawDown(c, br, rs)
	}
	return fmt.Errorf("unknown flow %q", kind)
}

func rawUp(c net.Conn, br *bufio.Reader, rs rings, ackEvery uint64) error {
	var hdr [4]byte
	var ack [8]byte
	var scratch []byte
	var n uint64
	writeAck := func(n uint64) error {
		binary.LittleEndian.PutUint64(ack[:], n)
		_, err := c.Write(ack[:])
		return err
	}
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return writeAck(n) // the rest, before the server's side closes
			}
			return err
		}
		size := int(binary.LittleEndian.Uint32(hdr[:]))
		var dst []byte
		if r := rs[size]; r != nil {
			dst = r.take()
		} else {
			if size > rawMaxResponse {
				return fmt.Errorf("payload of %d bytes", size)
			}
			if cap(scratch) < size {
				scratch = make([]byte, size)
			}
			dst = scratch[:size]
		}
		if _, err := io.ReadFull(br, dst); err != nil {
			return err
		}
		n++
		if n%ackEvery == 0 {
			if err := writeAck(n); err != nil {
				return err
			}
		}
	}
}

func rawDown(c net.Conn, br *bufio.Reader, rs rings) error {
	var req [8]byte
	var parts [][]byte
	for {
		if _, err := io.ReadFull(br, req[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		size := int(binary.LittleEndian.Uint32(req[:4]))
		n := int(binary.LittleEndian.Uint32(req[4:]))
		if msg := badRequest(size, n); msg != "" {
			return errors.New(msg)
		}
		parts = rs.responseParts(parts[:0], size, n)
		bufs := net.Buffers(parts) // WriteTo consumes bufs, not parts' array
		if _, err := bufs.WriteTo(c); err != nil {
			return err
		}
	}
}

// badRequest says what is wrong with a request for n payloads of size
// bytes, or returns "": raw and HTTP/2 echoes bound their responses.
func badRequest(size, n int) string {
	if size == 0 || n == 0 || size > rawMaxResponse/n {
		return fmt.Sprintf("request of %d payloads of %d bytes", n, size)
	}
	return ""
}

// responseParts appends the parts of a response of n payloads of size
// bytes: slots picked from the ring of that size or, with none, one
// cached random payload repeated.
func (rs rings) responseParts(parts [][]byte, size, n int) [][]byte {
	if r := rs[size]; r != nil {
		for range n {
			parts = r.pickParts(parts)
		}
		return parts
	}
	p := rawPayload(size)
	for range n {
		parts = append(parts, p)
	}
	return parts
}

var rawPayloads sync.Map // size -> []byte

func rawPayload(size int) []byte {
	if p, ok := rawPayloads.Load(size); ok {
		return p.([]byte)
	}
	p, _ := rawPayloads.LoadOrStore(size, randomBytes(size, 1))
	return p.([]byte)
}

// rawUpClient is upClient over a raw connection: it sends payloads until
// ctx ends with at most maxInFlight unacknowledged, then waits for the
// last acknowledgements.
func rawUpClient(ctx context.Context, c *loadConfig, seed uint64) ([]time.Duration, error) {
	conn, err := net.DialTimeout("tcp", c.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	frames := make([][]byte, 8)
	for i := range frames {
		f := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+c.payload), uint32(c.payload))
		frames[i] = append(f, randomBytes(c.payload, seed*100+uint64(i))...)
	}
	if _, err := conn.Write([]byte{'U'}); err != nil {
		return nil, err
	}
	var ack [8]byte
	return runUp(ctx, c,
		func(i int) error {
			_, err := conn.Write(frames[i%len(frames)])
			return err
		},
		func() (uint64, error) {
			_, err := io.ReadFull(conn, ack[:])
			return binary.LittleEndian.Uint64(ack[:]), err
		},
		func() {
			// Half-close: the server reads to the end, acknowledges the
			// rest and closes its side, which ends the acknowledgements.
			conn.(*net.TCPConn).CloseWrite()
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		})
}

// rawDownClient is downClient over a raw connection: it asks for inFlight
// payloads at a time; a consumer takes them from a buffer and times each
// take.
func rawDownClient(ctx context.Context, c *loadConfig) ([]time.Duration, error) {
	conn, err := net.DialTimeout("tcp", c.addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	context.AfterFunc(sctx, func() { conn.SetDeadline(time.Now()) })
	buf := make(chan int, c.inFlight)
	fetchErr := make(chan error, 1)
	go func() {
		defer close(buf)
		req := []byte{'D'}
		req = binary.LittleEndian.AppendUint32(req, uint32(c.payload))
		req = binary.LittleEndian.AppendUint32(req, uint32(c.inFlight))
		resp := make([]byte, c.payload*c.inFlight)
		for sctx.Err() == nil {
			if _, err := conn.Write(req); err != nil {
				if sctx.Err() == nil {
					fetchErr <- err
				}
				return
			}
			req = req[len(req)-8:] // the flow's byte only once
			if _, err := io.ReadFull(conn, resp); err != nil {
				if sctx.Err() == nil {
					fetchErr <- err
				}
				return
			}
			if !offer(sctx, buf, c.inFlight, c.payload) {
				return
			}
		}
	}()
	return takeAll(ctx, c, buf, fetchErr)
}
