package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
)

func TestCompletion(t *testing.T) {
	r := runCLI("completion", "bash")
	r.want(t, 0, `"queue") words="ls info declare rm purge mode"`, "")
	if !strings.Contains(r.stdout, "complete -o default -F _fibril fibril") {
		t.Fatalf("bash completion: %s", r.stdout)
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		// The script must parse and complete "fibril queue i" to "info".
		script := r.stdout + `
COMP_WORDS=(fibril queue i); COMP_CWORD=2; _fibril; echo "${COMPREPLY[*]}"
COMP_WORDS=(fibril lo); COMP_CWORD=1; _fibril; echo "${COMPREPLY[*]}"
COMP_WORDS=(fibril queue purge clicks --f); COMP_CWORD=4; _fibril; echo "${COMPREPLY[*]}"
COMP_WORDS=(fibril pub --co); COMP_CWORD=2; _fibril; echo "${COMPREPLY[*]}"`
		out, err := exec.Command(bash, "-c", script).CombinedOutput()
		if err != nil || string(out) != "info\nlog\n--force\n--count\n" {
			t.Fatalf("bash ran the script: %v\n%s", err, out)
		}
	}
	runCLI("completion", "zsh").want(t, 0, "bashcompinit", "")
	runCLI("completion", "fish").want(t, 0, `-a "verify" -d "check segment logs offline`, "")
	runCLI("completion", "fish").want(t, 0, `\"queue purge\"" -l force`, "")
	runCLI("completion", "tcsh").want(t, 2, "", "unknown shell")
	runCLI("completion").want(t, 2, "", "want one shell")
}

// Where a command takes a queue, bash completes the queue names the admin
// API lists (through the fibril binary, as a shell would run it).
func TestCompletionOfQueueNames(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cli, _ := binaries(t)
	b, url := newAdmin(t, "s3cret")
	for _, q := range []string{"clicks", "orders", "other"} {
		if _, err := b.Declare(context.Background(), appliance.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	r := runCLI("completion", "bash")
	script := r.stdout + `
COMP_WORDS=(fibril queue purge o); COMP_CWORD=3; _fibril; echo "${COMPREPLY[*]}"
COMP_WORDS=(fibril pub c); COMP_CWORD=2; _fibril; echo "${COMPREPLY[*]}"`
	cmd := exec.Command(bash, "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(cli)+":"+os.Getenv("PATH"), envAdmin+"="+url, envToken+"=s3cret")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "orders other\nclicks\n" {
		t.Fatalf("completing queue names: %v\n%q", err, out)
	}
	runCLI("completion", "fish").want(t, 0, `(fibril __queues 2>/dev/null)`, "")
}
