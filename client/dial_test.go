package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
)

// TestDialIgnoresResolverServiceConfig: a service config from the name
// resolver (as gRPC-Go's DNS resolver reads from TXT records) is not
// used. The resolver here gives one that times every ReverbService call
// out at once; honoured, it would fail ServerInfo with DeadlineExceeded.
// Not asking for it is also what keeps Dial from waiting on a TXT lookup.
func TestDialIgnoresResolverServiceConfig(t *testing.T) {
	s := servertest.Start(t, server.Config{Tables: []server.TableConfig{ptUniform("t")}})
	r := manual.NewBuilderWithScheme("reverietest")
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		sc := cc.ParseServiceConfig(`{"methodConfig": [{"name": [{"service": "deepmind.reverb.ReverbService"}], "timeout": "0.000000001s"}]}`)
		if sc.Err != nil {
			t.Errorf("parsing the service config: %v", sc.Err)
		}
		r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: s.Addr}}, ServiceConfig: sc})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "reverietest:///server", client.WithDialOptions(grpc.WithResolvers(r)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tables, err := c.ServerInfo(ctx)
	if err != nil {
		t.Fatalf("ServerInfo: %v (the resolver's service config was used)", err)
	}
	if _, ok := tables["t"]; !ok {
		t.Fatalf("ServerInfo: %v, want table t", tables)
	}
}

// TestDialContextError: a Dial whose ctx ends before the connection is
// ready returns an error that is both ErrUnavailable and ctx's error, as
// the package promises of every blocking call. The ctx's error used to be
// formatted into the message only, so errors.Is(err,
// context.DeadlineExceeded) was false.
func TestDialContextError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now: connections are refused

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c, err := client.Dial(ctx, addr)
	if err == nil {
		c.Close()
		t.Fatalf("Dial(%s) succeeded with nothing listening", addr)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Dial with an expired ctx: %v; want context.DeadlineExceeded and ErrUnavailable", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	c, err = client.Dial(ctx, addr)
	if err == nil {
		c.Close()
		t.Fatalf("Dial(%s) succeeded with nothing listening", addr)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Dial with a cancelled ctx: %v; want context.Canceled and ErrUnavailable", err)
	}
}
