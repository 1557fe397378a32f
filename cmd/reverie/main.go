// Command reverie is the reverie replay server and its tools.
//
//	reverie serve [--config FILE] [--port N] [--listen ADDR]
//
// Run "reverie help" for the list of subcommands.
package main

import (
	"fmt"
	"os"
)

type command struct {
	name, summary string
	run           func(args []string) int
}

var commands = []command{
	{"serve", "run the replay server", runServe},
	{"info", "print the tables of a running server", runInfo},
	{"bench", "measure insert and sample throughput and latency of a server", runBench},
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:])
		}
	}
	fmt.Fprintf(os.Stderr, "reverie: unknown command %q\n\n", args[0])
	usage()
	return 2
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: reverie <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'reverie <command> -h' for a command's flags.")
}
