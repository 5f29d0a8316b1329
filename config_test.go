package ratelimit

import (
	"reflect"
	"testing"
)

// TestConfigOptions checks that Config has every field of Options, and that
// RateLimitShared hands each on to its Limiter.
func TestConfigOptions(t *testing.T) {
	var cfg Config
	want := reflect.ValueOf(&Options{}).Elem()
	dst := reflect.ValueOf(&cfg).Elem()
	for i := range want.NumField() {
		f := want.Type().Field(i)
		cf, ok := dst.Type().FieldByName(f.Name)
		if !ok || cf.Type != f.Type {
			t.Fatalf("Config has no field %s %v, as Options does", f.Name, f.Type)
		}
		// A value that is not the zero value, distinct per field.
		v := reflect.New(f.Type).Elem()
		switch f.Type.Kind() {
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(i + 1))
		case reflect.String:
			v.SetString(f.Name)
		case reflect.Pointer:
			v.Set(reflect.New(f.Type.Elem()))
		case reflect.Interface:
			v.Set(reflect.ValueOf(NewMemoryCounter()))
		default:
			t.Fatalf("Options.%s: no test value for a %v", f.Name, f.Type)
		}
		want.Field(i).Set(v)
		dst.FieldByIndex(cf.Index).Set(v)
	}
	if got := cfg.options(); !reflect.DeepEqual(got, want.Interface()) {
		t.Fatalf("Config.options() = %+v, want %+v", got, want.Interface())
	}
}
