package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-broker/airlock/internal/config"
)

// cliEnv is what every command reads and writes: run's arguments.
type cliEnv struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// usageError is a command line that cannot run: an unknown command or
// flag, a missing argument. run shows the command's usage with it, and
// main exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode is the process's exit status for run's error.
func exitCode(err error) int {
	var u usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u):
		return 2
	}
	return 1
}

// run is the broker command: args are those after the program's name.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	root := newRoot(&cliEnv{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr})
	root.SetArgs(goFlags(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	var u usageError
	if errors.As(err, &u) && cmd != nil {
		fmt.Fprint(stderr, cmd.UsageString())
	}
	return err
}

// goFlags accepts the flag syntax of the CLI before it moved to cobra, Go's
// flag package's single dash for a long flag (-config FILE, -data-dir=D),
// as the double dash it means: scripts written for it keep working. Only a
// long flag the command has is rewritten, never a flag's value (a comment
// "-rf" stays "-rf"), nor anything after "--".
func goFlags(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	cmd.InitDefaultHelpFlag() // cobra adds --help when it runs: known here already
	lookup := func(name string) *pflag.Flag {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f
		}
		return cmd.InheritedFlags().Lookup(name)
	}
	takesValue := func(f *pflag.Flag) bool { return f != nil && f.NoOptDefVal == "" }
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		switch {
		case strings.HasPrefix(a, "--"):
			if name, _, eq := strings.Cut(a[2:], "="); !eq && takesValue(lookup(name)) {
				i++ // its value, whatever it looks like
			}
		case len(a) == 2 && a[0] == '-':
			if f := cmd.Flags().ShorthandLookup(a[1:]); takesValue(f) {
				i++
			}
		case len(a) > 2 && a[0] == '-':
			name, _, eq := strings.Cut(a[1:], "=")
			if f := lookup(name); f != nil {
				out[i] = "-" + a
				if !eq && takesValue(f) {
					i++
				}
			}
		}
	}
	return out
}

// newRoot is the whole command tree, `broker` and every subcommand
// (completion and help included, so a walk of the tree sees them all).
func newRoot(e *cliEnv) *cobra.Command {
	root := &cobra.Command{
		Use:   "broker",
		Short: "Airlock: a credential broker for AI-agent sandboxes",
		Long: `Airlock is a credential broker for AI-agent sandboxes: the sandbox holds only a session
token, the broker holds the credentials and decides, call by call, what goes upstream.

Server commands (serve, dev) run the broker. Client commands talk to its control plane:
  AIRLOCK_ADDR   the control plane's address (default http://127.0.0.1:8701)
  AIRLOCK_TOKEN  an API token (admin, operator, reviewer or auditor; each command's help
                 says which roles it takes)`,
		Version:       versionText(),
		SilenceErrors: true, // main prints the error
		SilenceUsage:  true, // run prints the usage, for usage errors only
		Args:          subcommandArgs,
		RunE:          needSubcommand,

		SuggestionsMinimumDistance: 2,
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newServeCmd(e), newDevCmd(e),
		newSessionCmd(e), newGrantCmd(e), newTokensCmd(e), newKillswitchCmd(e),
		newApprovalsCmd(e), newAuditCmd(e),
		newConfigCmd(e), newVersionCmd(e),
	)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

// group is a command that only holds subcommands: alone, or with an
// unknown subcommand, it is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: subcommandArgs, RunE: needSubcommand, SuggestionsMinimumDistance: 2}
	c.AddCommand(subs...)
	return c
}

func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}

func needSubcommand(cmd *cobra.Command, _ []string) error {
	return usageError{fmt.Errorf("%s needs a command (see %s --help)", cmd.CommandPath(), cmd.CommandPath())}
}

// positional makes an argument check's failure a usage error.
func positional(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func newVersionCmd(e *cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the broker's version, VCS revision and Go version",
		Example: "  broker version\n  broker --version",
		Args:    positional(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, versionText())
			return err
		},
	}
}

// versionText is the build's module version, VCS revision and time (from
// the build info; "(devel)" and "unknown" when the build did not record
// them) and Go version.
func versionText() string {
	version, path, revision, at, goVersion := "(devel)", "github.com/airlock-broker/airlock", "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.Main.Path != "" {
			path = bi.Main.Path
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified {
			revision += " (modified)"
		}
	}
	return fmt.Sprintf("broker %s\nmodule   %s\nrevision %s\ntime     %s\ngo       %s", version, path, revision, at, goVersion)
}

func newConfigCmd(e *cliEnv) *cobra.Command {
	check := &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate configuration files without starting the broker",
		Long: `Check loads each file as "broker serve --config FILE" would (${VAR} expands from this
environment) and prints every mistake at once, one per line, each with its field path.
It exits 1 when a file has mistakes and prints "FILE: ok" for a good one.`,
		Example: "  broker config check airlock.yaml",
		Args:    positional(cobra.MinimumNArgs(1)),
		RunE: func(_ *cobra.Command, files []string) error {
			bad := 0
			for _, f := range files {
				errs := config.Errors(config.Check(f, e.getenv))
				if len(errs) == 0 {
					fmt.Fprintf(e.stdout, "%s: ok\n", f)
					continue
				}
				bad++
				for _, err := range errs {
					fmt.Fprintf(e.stdout, "%s: %v\n", f, err)
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d configuration files have mistakes", bad, len(files))
			}
			return nil
		},
	}
	return group("config", "Work with configuration files", check)
}
