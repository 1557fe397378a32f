// Command profserve is `reverie serve` with a CPU profile: the same
// embedded server (package server, the config file `reverie serve
// --config` reads) on a loopback port, profiled from start to SIGTERM, so
// that a workload of bench/ can be driven against it by its usual client
// (`reverie bench`, bench/prioritized, the dm-reverb driver) and the
// server's CPU time read with `go tool pprof`. `reverie serve` has no
// pprof endpoint; bench/profile.sh runs this.
//
//	profserve --config F --cpuprofile server.prof [--memprofile heap.prof]
//	    [--blockprofile block.prof] [--mutexprofile mutex.prof]
//
// prints port=N on stdout once it serves; SIGTERM stops the profile and
// the server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/reverie-rl/reverie/server"
)

func main() {
	config := flag.String("config", "", "reverie config file (YAML or Reverb textproto); default: one table \"replay\"")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	cpuprofile := flag.String("cpuprofile", "server.prof", "where to write the CPU profile")
	memprofile := flag.String("memprofile", "", "where to write a heap profile at exit (optional)")
	blockprofile := flag.String("blockprofile", "", "where to write a blocking profile (where goroutines waited) at exit (optional)")
	mutexprofile := flag.String("mutexprofile", "", "where to write a mutex contention profile at exit (optional)")
	flag.Parse()
	if *blockprofile != "" {
		runtime.SetBlockProfileRate(10_000) // one event per 10 µs blocked
	}
	if *mutexprofile != "" {
		runtime.SetMutexProfileFraction(10)
	}

	cfg := server.DefaultConfig()
	if *config != "" {
		var err error
		if cfg, err = server.LoadConfigFile(*config); err != nil {
			fmt.Fprintln(os.Stderr, "profserve:", err)
			os.Exit(1)
		}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profserve:", err)
		os.Exit(1)
	}
	lis, err := server.Listen(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profserve:", err)
		os.Exit(1)
	}
	f, err := os.Create(*cpuprofile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profserve:", err)
		os.Exit(1)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "profserve:", err)
		os.Exit(1)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	fmt.Printf("port=%d\n", lis.Addr().(*net.TCPAddr).Port)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sigs:
	case err := <-served:
		fmt.Fprintln(os.Stderr, "profserve: serve:", err)
	}
	pprof.StopCPUProfile()
	f.Close()
	if *memprofile != "" {
		runtime.GC()
		writeProfile("heap", *memprofile)
	}
	writeProfile("block", *blockprofile)
	writeProfile("mutex", *mutexprofile)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
}

func writeProfile(name, path string) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profserve:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "profserve:", err)
	}
}
