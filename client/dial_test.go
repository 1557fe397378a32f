package client_test

import (
	"context"
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
