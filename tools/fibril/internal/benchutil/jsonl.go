package benchutil

import (
	"encoding/json"
	"fmt"
	"io"
)

// WriteJSONLine encodes v as a single line of JSON followed by a newline.
func WriteJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}
