package daemon

import (
	"encoding"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Key describes one config key, for flags and help texts.
type Key struct {
	Name    string // section.key, as in the file: "server.listen"
	Help    string
	Default string // the built-in value, as Set accepts it
}

// Keys lists every config key in file order.
func Keys() []Key {
	def := reflect.ValueOf(Default())
	var keys []Key
	walkKeys(def, func(name string, f reflect.StructField, v reflect.Value) {
		keys = append(keys, Key{Name: name, Help: f.Tag.Get("help"), Default: formatValue(v)})
	})
	return keys
}

// Set sets one key from text, as a flag gives it: strings as they are,
// sizes and durations with their units, lists comma-separated.
func (c *Config) Set(key, text string) error {
	var found bool
	var err error
	walkKeys(reflect.ValueOf(c).Elem(), func(name string, _ reflect.StructField, v reflect.Value) {
		if name != key {
			return
		}
		found = true
		err = setValue(v, text)
	})
	if !found {
		return fmt.Errorf("unknown config key %q", key)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// walkKeys calls fn for every field of every section of a Config value.
func walkKeys(cfg reflect.Value, fn func(name string, f reflect.StructField, v reflect.Value)) {
	t := cfg.Type()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("flag") == "-" {
			continue // top-level tables such as [[uplink]]: the file only
		}
		section := t.Field(i).Tag.Get("toml")
		sv := cfg.Field(i)
		st := sv.Type()
		for j := range st.NumField() {
			f := st.Field(j)
			if f.Tag.Get("flag") == "-" {
				continue // tables such as [[bridge.nats]]: the file only
			}
			fn(section+"."+f.Tag.Get("toml"), f, sv.Field(j))
		}
	}
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

func setValue(v reflect.Value, text string) error {
	if v.Addr().Type().Implements(textUnmarshaler) {
		return v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(text))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Slice:
		var items []string
		for _, s := range strings.Split(text, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		v.Set(reflect.ValueOf(items))
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", text)
		}
		v.SetInt(n)
	default:
		return fmt.Errorf("cannot set a %s from a flag", v.Type())
	}
	return nil
}

func formatValue(v reflect.Value) string {
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	if v.Kind() == reflect.Slice {
		return strings.Join(v.Interface().([]string), ",")
	}
	return fmt.Sprint(v.Interface())
}
