package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/client/connflags"
)

// runInfo implements "reverie info": the tables of a running server, as
// its ServerInfo RPC reports them. It uses only the client package, so it
// works against Reverb's server too.
func runInfo(args []string) int {
	fs := flag.NewFlagSet("reverie info", flag.ContinueOnError)
	addr := fs.String("addr", "localhost:8000", "server address: host:port, dns:///name:port or unix:///path")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the server")
	var conn connflags.Flags
	conn.Register(fs)
	if err := fs.Parse(args); err != nil {
		return parseStatus(err)
	}
	opts, err := conn.Options()
	if err != nil {
		fmt.Fprintf(os.Stderr, "reverie info: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "reverie info: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintln(os.Stderr, "reverie info: --timeout must be positive")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := client.Dial(ctx, *addr, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reverie info: cannot reach %s within %v: %v\n", *addr, *timeout, err)
		return 1
	}
	defer c.Close()
	tables, err := c.ServerInfo(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reverie info: ServerInfo from %s: %v\n", *addr, err)
		return 1
	}
	printInfo(os.Stdout, *addr, tables)
	return 0
}

// printInfo writes one aligned row per table, sorted by name.
func printInfo(out io.Writer, addr string, tables map[string]client.TableInfo) {
	names := make([]string, 0, len(tables))
	for name := range tables {
		names = append(names, name)
	}
	slices.Sort(names)
	fmt.Fprintf(out, "%s: %d table(s)\n\n", addr, len(names))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSIZE/MAX\tSAMPLER\tREMOVER\tMAX_TIMES_SAMPLED\tRATE_LIMITER\tINSERTS\tSAMPLES\tEPISODES\tUNIQUE_SAMPLES\tSIGNATURE")
	for _, name := range names {
		ti := tables[name]
		sampler := selectorName(ti.Sampler)
		maxTimes := "unlimited"
		if ti.MaxTimesSampled > 0 {
			maxTimes = strconv.Itoa(int(ti.MaxTimesSampled))
		}
		rl := ti.RateLimiter
		limiter := rateLimiterName(rl.GetSamplesPerInsert(), rl.GetMinSizeToSample(), rl.GetMinDiff(), rl.GetMaxDiff(), sampler)
		if rl == nil {
			limiter = "none"
		}
		signature := "no"
		if ti.Signature != nil {
			signature = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n",
			name, ti.CurrentSize, ti.MaxSize, sampler, selectorName(ti.Remover), maxTimes, limiter,
			ti.Inserts, ti.Samples, ti.NumEpisodes, ti.NumUniqueSamples, signature)
	}
	tw.Flush()
}

// keyDistribution is the part of Reverb's KeyDistributionOptions message
// that names a selector; P and H are its Prioritized and Heap messages.
type keyDistribution[P interface {
	comparable
	GetPriorityExponent() float64
}, H interface {
	comparable
	GetMinHeap() bool
}] interface {
	GetFifo() bool
	GetUniform() bool
	GetLifo() bool
	GetPrioritized() P
	GetHeap() H
}

// selectorName describes a selector as reverie's YAML config names it:
// "fifo", "lifo", "uniform", "min_heap", "max_heap" or "prioritized(0.6)";
// "custom" when no distribution is set (a server-side custom selector).
func selectorName[P interface {
	comparable
	GetPriorityExponent() float64
}, H interface {
	comparable
	GetMinHeap() bool
}](o keyDistribution[P, H]) string {
	var noP P
	var noH H
	switch {
	case o.GetFifo():
		return "fifo"
	case o.GetLifo():
		return "lifo"
	case o.GetUniform():
		return "uniform"
	case o.GetPrioritized() != noP:
		return "prioritized(" + formatFloat(o.GetPrioritized().GetPriorityExponent()) + ")"
	case o.GetHeap() != noH:
		if o.GetHeap().GetMinHeap() {
			return "min_heap"
		}
		return "max_heap"
	}
	return "custom"
}

// rateLimiterName names a rate limiter by the Reverb constructor that makes
// it (MinSize, Queue, Stack, SampleToInsertRatio), or lists its four
// numbers; ±DBL_MAX shows as ±inf.
func rateLimiterName(spi float64, minSize int64, minDiff, maxDiff float64, sampler string) string {
	unbounded := func(x float64) bool { return math.Abs(x) >= math.MaxFloat64 }
	switch {
	case spi == 1 && unbounded(minDiff) && minDiff < 0 && unbounded(maxDiff) && maxDiff > 0:
		return fmt.Sprintf("MinSize(%d)", minSize)
	case spi == 1 && minSize == 1 && minDiff == 0 && maxDiff >= 1 && maxDiff == math.Trunc(maxDiff) && sampler == "fifo":
		return fmt.Sprintf("Queue(%s)", formatFloat(maxDiff))
	case spi == 1 && minSize == 1 && minDiff == 0 && maxDiff >= 1 && maxDiff == math.Trunc(maxDiff) && sampler == "lifo":
		return fmt.Sprintf("Stack(%s)", formatFloat(maxDiff))
	}
	if !unbounded(minDiff) && !unbounded(maxDiff) {
		center := spi * float64(minSize)
		lo, hi := center-minDiff, maxDiff-center
		if lo >= 0 && math.Abs(lo-hi) <= 1e-9*math.Max(1, math.Abs(lo)) {
			return fmt.Sprintf("SampleToInsertRatio(%s, %d, %s)", formatFloat(spi), minSize, formatFloat(lo))
		}
	}
	return fmt.Sprintf("RateLimiter(spi=%s, min_size=%d, min_diff=%s, max_diff=%s)",
		formatFloat(spi), minSize, formatBound(minDiff), formatBound(maxDiff))
}

// formatBound formats a diff bound, showing ±DBL_MAX (and ±Inf) as ±inf.
func formatBound(x float64) string {
	switch {
	case x >= math.MaxFloat64:
		return "+inf"
	case x <= -math.MaxFloat64:
		return "-inf"
	}
	return formatFloat(x)
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
