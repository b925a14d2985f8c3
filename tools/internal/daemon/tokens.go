package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// CredentialName is the systemd credential fibrild reads tokens from:
// with LoadCredential=tokens:/etc/fibril/tokens in the unit, systemd
// hands the service $CREDENTIALS_DIRECTORY/tokens, readable by it alone.
const CredentialName = "tokens"

// Limits of a tokens file: a token as long as the wire protocol allows,
// and a file no larger than an operator would write by hand.
const (
	maxTokenLen       = 65535
	maxTokensFileSize = 4 << 20
)

// ResolveTokens returns c with the tokens of [server] tokens_file and of
// the systemd credential (credentialsDir/tokens, when credentialsDir is
// set and the file exists) added to [server] tokens, each token once, in
// that order. Both files are read as readTokensFile says; one that cannot
// be read, is readable by every user, or holds no token is an error. It
// can run again on its own result: the files' tokens are not added twice.
func (c Config) ResolveTokens(credentialsDir string) (Config, error) {
	tokens := append([]string(nil), c.Server.Tokens...)
	seen := make(map[string]bool, len(tokens))
	for _, t := range tokens {
		seen[t] = true
	}
	add := func(key, path string) error {
		more, err := readTokensFile(path)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		for _, t := range more {
			if !seen[t] {
				seen[t] = true
				tokens = append(tokens, t)
			}
		}
		return nil
	}
	if c.Server.TokensFile != "" {
		if err := add("server.tokens_file", c.Server.TokensFile); err != nil {
			return Config{}, err
		}
	}
	if credentialsDir != "" {
		path := filepath.Join(credentialsDir, CredentialName)
		if _, err := os.Stat(path); err == nil {
			if err := add("systemd credential "+CredentialName, path); err != nil {
				return Config{}, err
			}
		}
	}
	c.Server.Tokens = tokens
	return c, nil
}

// errWorldReadable: a tokens file any user of the machine could read.
var errWorldReadable = errors.New("readable by every user of the machine")

// readTokensFile reads the tokens in the file at path (parseTokens). The
// file must not be readable by every user (mode & 0o004), must hold at
// most 4 MiB, and must name at least one token.
func readTokensFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return nil, fmt.Errorf("%s is %w (mode %04o): run chmod o-r %s", path, errWorldReadable, fi.Mode().Perm(), path)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > maxTokensFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxTokensFileSize)
	}
	tokens, err := parseTokens(io.LimitReader(f, maxTokensFileSize))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s holds no token (every line is blank or a # comment)", path)
	}
	return tokens, nil
}

// parseTokens reads a tokens file: one token a line, with the spaces
// around it dropped; blank lines and lines whose first non-space
// character is # are skipped (a # inside a token is part of it). A token
// may not hold control characters nor be longer than 65535 bytes.
func parseTokens(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxTokenLen+256)
	var tokens []string
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if len(t) > maxTokenLen {
			return nil, fmt.Errorf("line %d: token longer than %d bytes", line, maxTokenLen)
		}
		if i := strings.IndexFunc(t, unicode.IsControl); i >= 0 {
			return nil, fmt.Errorf("line %d: control character %q in a token", line, t[i])
		}
		tokens = append(tokens, t)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", line+1, maxTokenLen)
		}
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return tokens, nil
}
