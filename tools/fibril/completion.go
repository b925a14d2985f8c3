package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

const completionHelp = `Usage: fibril completion bash|zsh|fish

Prints a shell completion script for fibril's commands. Load it with:
  bash:  source <(fibril completion bash)      (or save it under
         /etc/bash_completion.d/fibril)
  zsh:   source <(fibril completion zsh)
  fish:  fibril completion fish > ~/.config/fish/completions/fibril.fish
`

// runCompletion is "fibril completion".
func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, completionHelp)
		return nil
	}
	if len(args) != 1 {
		return usagef("want one shell: bash, zsh or fish")
	}
	tree := commandTree()
	switch args[0] {
	case "bash":
		return writeBashCompletion(stdout, tree)
	case "zsh":
		// zsh runs the bash script through bashcompinit.
		fmt.Fprintln(stdout, "autoload -U +X bashcompinit && bashcompinit")
		return writeBashCompletion(stdout, tree)
	case "fish":
		return writeFishCompletion(stdout, tree)
	}
	return usagef("unknown shell %q: want bash, zsh or fish", args[0])
}

// commandTree maps each command prefix ("" for the top) to the words that
// may follow it.
func commandTree() map[string][]string {
	tree := map[string][]string{}
	for _, c := range commands {
		for i := range c.path {
			prefix := strings.Join(c.path[:i], " ")
			if !slices.Contains(tree[prefix], c.path[i]) {
				tree[prefix] = append(tree[prefix], c.path[i])
			}
		}
	}
	tree[""] = append(tree[""], "help", "--help", "--version")
	tree["completion"] = []string{"bash", "zsh", "fish"}
	return tree
}

// queueArgCommands are the commands whose first argument is a queue name:
// the completion scripts offer the queues the admin API lists
// (completeQueues) there.
var queueArgCommands = []string{"pub", "sub", "queue info", "queue rm", "queue purge", "queue mode"}

// completeQueuesCommand is the hidden command the completion scripts run
// for queue names.
const completeQueuesCommand = "__queues"

// completeQueues prints the queue names the admin API lists, one a line,
// with the connection defaults every admin command uses (flags,
// environment, context); nothing on any failure, so a shell completing
// offline stays quiet.
func completeQueues(ctx context.Context, args []string, stdout io.Writer) int {
	fs := pflag.NewFlagSet("fibril "+completeQueuesCommand, pflag.ContinueOnError)
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, "", args, io.Discard, 0, 0, "")
	if done || err != nil {
		return exitFailure
	}
	var raw json.RawMessage
	if err := api.do(ctx, "GET", "/api/queues", nil, &raw); err != nil {
		return exitFailure
	}
	queues, _, err := queueList(raw)
	if err != nil {
		return exitFailure
	}
	for _, q := range queues {
		if name, ok := q["name"].(string); ok {
			fmt.Fprintln(stdout, name)
		}
	}
	return exitOK
}

// flagPattern finds the flags a command's help lists ("-f, --force").
var flagPattern = regexp.MustCompile(`(?m)^\s+(?:(-[a-zA-Z]), )?(--[a-z][a-z0-9-]*)`)

// commandFlags are the flags of each command, read from its own --help
// (so the scripts list exactly what each command parses), by path.
func commandFlags() map[string][]string {
	out := map[string][]string{}
	for _, c := range commands {
		var help strings.Builder
		_ = c.run(context.Background(), []string{"--help"}, &help, io.Discard)
		var flags []string
		add := func(f string) {
			if !slices.Contains(flags, f) {
				flags = append(flags, f)
			}
		}
		for _, m := range flagPattern.FindAllStringSubmatch(help.String(), -1) {
			if m[1] != "" {
				add(m[1])
			}
			add(m[2])
		}
		add("--help")
		out[strings.Join(c.path, " ")] = flags
	}
	return out
}

func writeBashCompletion(w io.Writer, tree map[string][]string) error {
	prefixes := make([]string, 0, len(tree))
	for p := range tree {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	var b strings.Builder
	b.WriteString("# bash completion for fibril\n_fibril() {\n")
	b.WriteString("  local cur=${COMP_WORDS[COMP_CWORD]} path=\"\" w i\n")
	b.WriteString("  for ((i = 1; i < COMP_CWORD; i++)); do\n")
	b.WriteString("    w=${COMP_WORDS[i]}\n    [[ $w == -* ]] && continue\n")
	b.WriteString("    path=\"${path:+$path }$w\"\n  done\n")
	// A word starting with '-' completes the command's own flags.
	flags := commandFlags()
	paths := make([]string, 0, len(flags))
	for p := range flags {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	b.WriteString("  if [[ $cur == -* ]]; then\n    local flags=\"--help\"\n    case \"$path\" in\n")
	for _, p := range paths {
		// The command's words, then any arguments: "queue purge clicks".
		fmt.Fprintf(&b, "      %q|%q*) flags=%q ;;\n", p, p+" ", strings.Join(flags[p], " "))
	}
	b.WriteString("    esac\n    COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n    return\n  fi\n")
	b.WriteString("  local words=\"\"\n  case \"$path\" in\n")
	for _, p := range prefixes {
		fmt.Fprintf(&b, "    %q) words=%q ;;\n", p, strings.Join(tree[p], " "))
	}
	for _, p := range queueArgCommands {
		fmt.Fprintf(&b, "    %q) words=\"$(fibril %s 2>/dev/null) --help\" ;;\n", p, completeQueuesCommand)
	}
	b.WriteString("    *) words=\"--help --json\" ;;\n  esac\n")
	b.WriteString("  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n}\n")
	b.WriteString("complete -o default -F _fibril fibril\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeFishCompletion(w io.Writer, tree map[string][]string) error {
	var b strings.Builder
	b.WriteString("# fish completion for fibril\ncomplete -c fibril -f\n")
	summaries := map[string]string{}
	for _, c := range commands {
		summaries[strings.Join(c.path, " ")] = c.summary
	}
	prefixes := make([]string, 0, len(tree))
	for p := range tree {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		cond := "__fish_use_subcommand"
		if p != "" {
			// The words typed so far (flags aside) must be exactly p.
			cond = fmt.Sprintf("test (string join ' ' (commandline -opc)[2..] | string replace -ra ' ?-[^ ]*' '') = %q", p)
		}
		for _, word := range tree[p] {
			if strings.HasPrefix(word, "-") {
				continue
			}
			desc := summaries[strings.TrimSpace(p+" "+word)]
			fmt.Fprintf(&b, "complete -c fibril -n %q -a %q -d %q\n", cond, word, desc)
		}
	}
	flags := commandFlags()
	paths := make([]string, 0, len(flags))
	for p := range flags {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		cond := fmt.Sprintf("test (string join ' ' (commandline -opc)[2..] | string replace -ra ' ?-[^ ]*' '') = %q", p)
		for _, f := range flags[p] {
			if long, ok := strings.CutPrefix(f, "--"); ok {
				fmt.Fprintf(&b, "complete -c fibril -n %q -l %s\n", cond, long)
			}
		}
	}
	for _, p := range queueArgCommands {
		cond := fmt.Sprintf("test (string join ' ' (commandline -opc)[2..] | string replace -ra ' ?-[^ ]*' '') = %q", p)
		fmt.Fprintf(&b, "complete -c fibril -n %q -a \"(fibril %s 2>/dev/null)\" -d queue\n", cond, completeQueuesCommand)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
