package main

import (
	"os/exec"
	"strings"
	"testing"
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
COMP_WORDS=(fibril lo); COMP_CWORD=1; _fibril; echo "${COMPREPLY[*]}"`
		out, err := exec.Command(bash, "-c", script).CombinedOutput()
		if err != nil || string(out) != "info\nlog\n" {
			t.Fatalf("bash ran the script: %v\n%s", err, out)
		}
	}
	runCLI("completion", "zsh").want(t, 0, "bashcompinit", "")
	runCLI("completion", "fish").want(t, 0, `-a "verify" -d "check segment logs offline`, "")
	runCLI("completion", "tcsh").want(t, 2, "", "unknown shell")
	runCLI("completion").want(t, 2, "", "want one shell")
}
