package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
)

const settingsGetHelp = `Usage: fibril settings get [KEY...] [flags]

Prints fibrild's runtime settings through the admin HTTP API
(GET /api/settings), or only the keys named. With --json it prints them as
one JSON object. Exit status 3 for a key that does not exist.
`

const settingsSetHelp = `Usage: fibril settings set KEY=VALUE... [flags]

Changes runtime settings through the admin HTTP API: it reads the current
settings, applies the changes and sends them all back (PUT /api/settings);
fibrild validates them and changes nothing if any is refused. VALUE is read
as JSON when it parses as JSON (numbers, true, false), else as a string.
Example: fibril settings set storage.background_sync_interval_ms=50
`

// runSettingsGet is "fibril settings get".
func runSettingsGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril settings get", pflag.ContinueOnError)
	var conn connFlags
	conn.addAdminFlags(fs)
	if done, err := parseFlags(fs, settingsGetHelp, args, stdout); done || err != nil {
		return err
	}
	api, err := conn.adminClient()
	if err != nil {
		return err
	}
	settings, err := getSettings(ctx, api)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		picked := map[string]any{}
		for _, k := range fs.Args() {
			v, ok := settings[k]
			if !ok {
				return withExit(exitNotFound, fmt.Errorf("no setting %q; the settings are: %s", k, strings.Join(sortedKeys(settings), ", ")))
			}
			picked[k] = v
		}
		settings = picked
	}
	return printSettings(stdout, settings, conn.json)
}

// runSettingsSet is "fibril settings set".
func runSettingsSet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril settings set", pflag.ContinueOnError)
	var conn connFlags
	conn.addAdminFlags(fs)
	if done, err := parseFlags(fs, settingsSetHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(fs, 1, -1, "KEY=VALUE"); err != nil {
		return err
	}
	changes := map[string]any{}
	for _, a := range fs.Args() {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return usagef("%q: want KEY=VALUE", a)
		}
		var parsed any
		if err := json.Unmarshal([]byte(v), &parsed); err != nil {
			parsed = v
		}
		changes[k] = parsed
	}
	api, err := conn.adminClient()
	if err != nil {
		return err
	}
	settings, err := getSettings(ctx, api)
	if err != nil {
		return err
	}
	for k, v := range changes {
		if _, ok := settings[k]; !ok {
			return withExit(exitNotFound, fmt.Errorf("no setting %q; the settings are: %s", k, strings.Join(sortedKeys(settings), ", ")))
		}
		settings[k] = v
	}
	var updated map[string]any
	if err := api.do(ctx, "PUT", "/api/settings", settings, &updated); err != nil {
		return fmt.Errorf("update settings: %w", err)
	}
	if updated == nil {
		updated = settings
	}
	return printSettings(stdout, updated, conn.json)
}

func getSettings(ctx context.Context, api *adminClient) (map[string]any, error) {
	var settings map[string]any
	if err := api.do(ctx, "GET", "/api/settings", nil, &settings); err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	return settings, nil
}

func printSettings(w io.Writer, settings map[string]any, asJSON bool) error {
	if asJSON {
		return writeJSON(w, settings)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	for _, k := range sortedKeys(settings) {
		fmt.Fprintf(tw, "%s\t= %s\n", k, compact(settings[k]))
	}
	return tw.Flush()
}
