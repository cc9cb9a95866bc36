package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// nestedKeys are the config file's sections whose keys are not flag names:
// section -> key -> flag.
var nestedKeys = map[string]map[string]string{
	"client-transport-security": {
		"cert-file": "cert-file", "key-file": "key-file", "client-cert-file": "client-cert-file",
		"client-key-file": "client-key-file", "client-cert-auth": "client-cert-auth",
		"trusted-ca-file": "trusted-ca-file", "auto-tls": "auto-tls", "crl-file": "client-crl-file",
		"allowed-hostname": "client-cert-allowed-hostname",
	},
	"peer-transport-security": {
		"cert-file": "peer-cert-file", "key-file": "peer-key-file", "client-cert-file": "peer-client-cert-file",
		"client-key-file": "peer-client-key-file", "client-cert-auth": "peer-client-cert-auth",
		"trusted-ca-file": "peer-trusted-ca-file", "auto-tls": "peer-auto-tls", "crl-file": "peer-crl-file",
		"allowed-cn": "peer-cert-allowed-cn", "allowed-hostname": "peer-cert-allowed-hostname",
		"skip-client-san-verification": "peer-skip-client-san-verification",
	},
	"socket-options": {"reuse-port": "socket-reuse-port", "reuse-address": "socket-reuse-address"},
	"discovery-config": {
		"endpoints": "discovery-endpoints", "token": "discovery-token", "dial-timeout": "discovery-dial-timeout",
		"request-timeout": "discovery-request-timeout", "keepalive-time": "discovery-keepalive-time",
		"keepalive-timeout": "discovery-keepalive-timeout", "insecure-transport": "discovery-insecure-transport",
		"insecure-skip-tls-verify": "discovery-insecure-skip-tls-verify", "cert": "discovery-cert",
		"key": "discovery-key", "cacert": "discovery-cacert", "user": "discovery-user", "password": "discovery-password",
	},
}

// fromConfigFile reads etcd's YAML configuration file into fresh settings.
// As etcd, the file is all: flags and environment variables given beside
// it are ignored, each named in a warning (etcd says so only in general).
// Its keys are the flags' names; a YAML list is a comma-separated flag
// value, and a number for a duration is nanoseconds (etcd decodes the file
// into Go durations), while a string is Go's form, "10s".
func fromConfigFile(cmdline *settings, file string, env map[string]string) (*settings, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--config-file: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("--config-file %s: %w", file, err)
	}
	s := newSettings()
	s.o.configFile = file
	s.warnings = cmdline.warnings
	var ignored []string
	for name, v := range cmdline.given {
		if name != "config-file" {
			ignored = append(ignored, "--"+name+" ("+v.from+")")
		}
	}
	for k := range env {
		if (strings.HasPrefix(k, "ETCD_") || strings.HasPrefix(k, "CORENODE_")) && !strings.HasSuffix(k, "_CONFIG_FILE") {
			n := strings.ToLower(strings.ReplaceAll(strings.SplitN(k, "_", 2)[1], "_", "-"))
			if s.values[n] != nil {
				ignored = append(ignored, k)
			}
		}
	}
	sort.Strings(ignored)
	s.warn("loaded server configuration, other configuration command line flags and environment variables will be ignored if provided",
		"path", file, "ignored", strings.Join(ignored, ", "))
	var unknown []string
	set := func(key, name string, v any) error {
		fv := s.values[name]
		if fv == nil {
			unknown = append(unknown, key)
			return nil
		}
		if v == nil {
			return nil
		}
		str, err := yamlString(fv, v)
		if err != nil {
			return fmt.Errorf("--config-file %s: %s: %w", file, key, err)
		}
		s.origin = "config file key " + key
		if err := fv.Set(str); err != nil {
			return fmt.Errorf("--config-file %s: %s: %q: %w", file, key, str, err)
		}
		s.spelled[fv.def.name] = name
		return nil
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := doc[k]
		if section, ok := nestedKeys[k]; ok {
			m, ok := v.(map[string]any)
			if v != nil && !ok {
				return nil, fmt.Errorf("--config-file %s: %s: not a mapping", file, k)
			}
			sub := make([]string, 0, len(m))
			for sk := range m {
				sub = append(sub, sk)
			}
			sort.Strings(sub)
			for _, sk := range sub {
				name, ok := section[sk]
				if !ok {
					unknown = append(unknown, k+"."+sk)
					continue
				}
				if err := set(k+"."+sk, name, m[sk]); err != nil {
					return nil, err
				}
			}
			continue
		}
		if k == "config-file" {
			unknown = append(unknown, k)
			continue
		}
		if err := set(k, k, v); err != nil {
			return nil, err
		}
	}
	if len(unknown) > 0 {
		s.warn("config file keys corenode does not know: ignored", "path", file, "keys", strings.Join(unknown, ", "))
	}
	return s, s.check()
}

// yamlString is a YAML value as the flag's command-line value.
func yamlString(fv *flagValue, v any) (string, error) {
	switch v := v.(type) {
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := yamlString(fv, e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return "", fmt.Errorf("a mapping where a value belongs")
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		if _, ok := fv.p.(*time.Duration); ok {
			return time.Duration(v).String(), nil
		}
		return strconv.Itoa(v), nil
	case float64:
		if _, ok := fv.p.(*time.Duration); ok {
			return time.Duration(v).String(), nil
		}
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	}
	return fmt.Sprint(v), nil
}
