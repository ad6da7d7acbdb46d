// Command k8sproto writes what the kai-py emulator needs to read Kubernetes'
// protobuf encoding, taken from the Go types of k8s.io/api themselves:
//
//	go run . schema   > ../../kai_py/emulator/apiserver/protobuf_schema.json
//	go run . fixtures   ../../tests/emulator/fixtures/protobuf
//
// "schema" walks every stable (GA) kind of k8s.io/api through reflection and
// records, per Go struct, each field's protobuf number, its JSON name, its
// type and whether the JSON form omits its zero value (the struct tags are
// where go-to-protobuf itself takes the field numbers from, and they also
// say what generated.proto cannot: JSON inlining, pointers, omitempty).
// "fixtures" encodes sample objects with client-go's own protobuf serializer
// and writes each as <name>.pb next to <name>.json, the object as the Go
// JSON encoder writes it: the tests decode the first and compare with the
// second. Bump the k8s.io/api version in go.mod to follow a newer API server.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: k8sproto schema | fixtures DIR")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "schema":
		writeSchema()
	case "fixtures":
		writeFixtures(os.Args[2])
	default:
		os.Exit(2)
	}
}

// field: [json name, type, flags, message] by number; flags: r repeated,
// m map (type is the value's; keys are strings), p pointer, o omitempty,
// z omitzero, i inlined into the parent's JSON.
type field []any

var (
	messages = map[string]map[string]field{}
	special  = map[string]string{
		"k8s.io/apimachinery/pkg/apis/meta/v1.Time":       "time",
		"k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime":  "microtime",
		"k8s.io/apimachinery/pkg/apis/meta/v1.Duration":   "duration",
		"k8s.io/apimachinery/pkg/api/resource.Quantity":   "quantity",
		"k8s.io/apimachinery/pkg/util/intstr.IntOrString": "intorstring",
		"k8s.io/apimachinery/pkg/runtime.RawExtension":    "raw",
		"k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1":   "fieldsv1",
		"k8s.io/apimachinery/pkg/runtime.Unknown":         "unknown",
	}
)

func typeName(t reflect.Type) string {
	return strings.TrimPrefix(strings.TrimPrefix(t.PkgPath(), "k8s.io/api/"), "k8s.io/apimachinery/pkg/") + "." + t.Name()
}

// scalar names the protobuf scalar of a Go kind.
func scalar(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int32, reflect.Int64, reflect.Int:
		return "int"
	case reflect.Uint32, reflect.Uint64:
		return "uint"
	case reflect.Float64:
		return "double"
	case reflect.Float32:
		return "float"
	}
	return ""
}

// kindOf returns the type tag for t (no pointer, no slice) and the message name if any.
func kindOf(t reflect.Type) (string, string) {
	if s, ok := special[t.PkgPath()+"."+t.Name()]; ok {
		return s, ""
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
		return "bytes", ""
	}
	if t.Kind() == reflect.Slice && t.Name() != "" {
		// A named []string with its own Marshal (ExtraValue): a message of one repeated string.
		return "strings", ""
	}
	if t.Kind() == reflect.Struct {
		walk(t)
		return "msg", typeName(t)
	}
	if s := scalar(t); s != "" {
		return s, ""
	}
	panic("no protobuf form for " + t.String())
}

func walk(t reflect.Type) {
	name := typeName(t)
	if _, seen := messages[name]; seen {
		return
	}
	fields := map[string]field{}
	messages[name] = fields
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("protobuf")
		if tag == "" || tag == "-" {
			continue
		}
		parts := strings.Split(tag, ",")
		number, err := strconv.Atoi(parts[1])
		if err != nil {
			panic(err)
		}
		jsonTag := strings.Split(f.Tag.Get("json"), ",")
		flags := ""
		jsonName := jsonTag[0]
		for _, opt := range jsonTag[1:] {
			switch opt {
			case "omitempty":
				flags += "o"
			case "omitzero":
				flags += "z"
			case "inline":
				flags += "i"
			}
		}
		if jsonName == "-" {
			continue
		}
		if f.Anonymous && jsonName == "" && !strings.Contains(flags, "i") {
			flags += "i" // an embedded struct is flattened into its parent's JSON
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			flags += "p"
			ft = ft.Elem()
		}
		var kind, msg string
		switch {
		case ft.Kind() == reflect.Map:
			flags += "m"
			kind, msg = kindOf(ft.Elem())
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8 && ft.Name() == "":
			flags += "r"
			et := ft.Elem()
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			kind, msg = kindOf(et)
		default:
			kind, msg = kindOf(ft)
		}
		entry := field{jsonName, kind, flags}
		if msg != "" {
			entry = append(entry, msg)
		}
		fields[strconv.Itoa(number)] = entry
	}
}

func writeSchema() {
	scheme := newScheme()
	kinds := map[string]string{}
	for gvk, t := range scheme.AllKnownTypes() {
		if strings.Contains(gvk.Version, "alpha") || strings.Contains(gvk.Version, "beta") {
			continue
		}
		if t.Kind() != reflect.Struct || strings.HasSuffix(gvk.Kind, "List") && gvk.Kind != "List" {
			continue
		}
		walk(t)
		kinds[gvk.GroupVersion().String()+" "+gvk.Kind] = typeName(t)
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	out := map[string]any{"version": apiVersion(), "kinds": kinds, "messages": messages}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}

func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, add := range addToScheme {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Group: "meta.k8s.io", Version: "v1"})
	return scheme
}

func writeFixtures(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		panic(err)
	}
	scheme := newScheme()
	for name, obj := range samples() {
		pb, js := encode(scheme, obj)
		must(os.WriteFile(filepath.Join(dir, name+".pb"), pb, 0o644))
		must(os.WriteFile(filepath.Join(dir, name+".json"), js, 0o644))
	}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
