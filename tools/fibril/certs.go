package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/federation"
)

const clusterCertsHelp = `Usage: fibril cluster certs ca [--dir DIR]
       fibril cluster certs node ID [--host HOST ...] [--dir DIR]

Makes the certificates that secure a cluster's port (mutual TLS; see
docs/security.md). "ca" creates the cluster's CA in DIR (ca.pem, and
ca-key.pem, which stays on the machine that signs); "node ID" signs a
certificate naming node ID (ID.pem, ID-key.pem) with that CA, adding each
--host (name or address) as an alternative name. Copy ca.pem, ID.pem and
ID-key.pem to node ID and set [cluster] tls_ca, tls_cert and tls_key to
them. A node is the node its certificate names: it can join, and stream a
queue it owns, only as that id. Existing files are never overwritten. Keys
are written readable by their owner only.

  fibril cluster certs ca --dir certs
  fibril cluster certs node n1 --host 10.0.0.1 --dir certs
  fibril cluster certs node n2 --host 10.0.0.2 --dir certs
`

// runClusterCerts is "fibril cluster certs ca|node".
func runClusterCerts(_ context.Context, args []string, stdout, _ io.Writer) error {
	flags := pflag.NewFlagSet("fibril cluster certs", pflag.ContinueOnError)
	dir := flags.String("dir", ".", "directory of the CA and the certificates")
	hosts := flags.StringArray("host", nil, "a name or address the node is reached at (repeatable)")
	if done, err := parseFlags(flags, clusterCertsHelp, args, stdout); done || err != nil {
		return err
	}
	if flags.NArg() == 0 {
		return usagef("fibril cluster certs: say ca or node ID")
	}
	caCert, caKey := filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "ca-key.pem")
	switch flags.Arg(0) {
	case "ca":
		if err := wantArgs(flags, 1, 1, "ca"); err != nil {
			return err
		}
		certPEM, keyPEM, err := federation.NewCA("Fibril cluster CA")
		if err != nil {
			return err
		}
		if err := writeNew(caCert, certPEM, 0o644, caKey, keyPEM); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %s (keep the key on the machine that signs node certificates)\n", caCert, caKey)
		return nil
	case "node":
		if err := wantArgs(flags, 2, 2, "node ID"); err != nil {
			return err
		}
		id := flags.Arg(1)
		if id == "" || id == "." || id == ".." || strings.ContainsAny(id, `/\`) || strings.ContainsFunc(id, unicode.IsControl) {
			return usagef("fibril cluster certs node: %q is not a node ID (it names the files written in --dir)", id)
		}
		ca, err := os.ReadFile(caCert)
		if err != nil {
			return fmt.Errorf("read the CA (make it with fibril cluster certs ca): %w", err)
		}
		key, err := os.ReadFile(caKey)
		if err != nil {
			return fmt.Errorf("read the CA key: %w", err)
		}
		certPEM, keyPEM, err := federation.NewNodeCert(ca, key, id, *hosts)
		if err != nil {
			return err
		}
		nodeCert, nodeKey := filepath.Join(*dir, id+".pem"), filepath.Join(*dir, id+"-key.pem")
		if err := writeNew(nodeCert, certPEM, 0o644, nodeKey, keyPEM); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %s for node %s; on it set [cluster] tls_ca = %q, tls_cert and tls_key to them\n",
			nodeCert, nodeKey, id, "ca.pem")
		return nil
	}
	return usagef("fibril cluster certs: %q is not ca or node", flags.Arg(0))
}

// writeNew writes a certificate and its key, refusing to replace either
// (or to follow a link in their place): the key first, readable by its
// owner only.
func writeNew(certPath string, certPEM []byte, certMode fs.FileMode, keyPath string, keyPEM []byte) error {
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists; remove it first to make a new one", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(certPath), 0o755); err != nil {
		return err
	}
	if err := createNew(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return createNew(certPath, certPEM, certMode)
}

// createNew writes a file that must not exist yet.
func createNew(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path) // a partial certificate or key is worse than none
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
