package docker

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// composeService is the part of a Compose service this test checks.
type composeService struct {
	Image       string            `yaml:"image"`
	Entrypoint  []string          `yaml:"entrypoint"`
	NetworkMode string            `yaml:"network_mode"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Networks    map[string]struct {
		IPv4Address string `yaml:"ipv4_address"`
	} `yaml:"networks"`
}

// flagEnvNames runs `bin/NAME --help` and returns the environment
// variables its flags read.
func flagEnvNames(t *testing.T, bin, name, prefix string) map[string]bool {
	t.Helper()
	out, err := exec.Command(filepath.Join(bin, name), "--help").CombinedOutput()
	require.NoError(t, err, "%s --help: %s", name, out)
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		names[prefix+"_"+strings.ToUpper(strings.ReplaceAll(m[1], "-", "_"))] = true
	}
	require.NotEmpty(t, names)
	return names
}

// TestComposeFileSettings checks deploy/docker-compose.yml without Docker:
// every SWD_*/DUMMYAPP_* variable is a flag's (the binaries ignore unknown
// ones silently), each swd shares its app's namespace and advertises that
// namespace's fixed address, and ports are published on loopback only.
func TestComposeFileSettings(t *testing.T) {
	root := repoRoot(t)
	bin := requireBinaries(t, root)
	known := map[string]map[string]bool{
		"SWD_":      flagEnvNames(t, bin, "swd", "SWD"),
		"DUMMYAPP_": flagEnvNames(t, bin, "dummyapp", "DUMMYAPP"),
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "docker-compose.yml"))
	require.NoError(t, err)
	var file struct {
		Services map[string]composeService `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(data, &file))
	svc := file.Services

	for name, s := range svc {
		for v := range s.Environment {
			for prefix, flags := range known {
				if strings.HasPrefix(v, prefix) {
					assert.True(t, flags[v], "service %s: %s is not a flag's variable", name, v)
				}
			}
		}
		for _, p := range s.Ports {
			assert.True(t, strings.HasPrefix(p, "127.0.0.1:"), "service %s publishes %q beyond loopback", name, p)
		}
		assert.Equal(t, "${SWD_IMAGE:-swd:dev}", s.Image, "service %s", name)
	}

	for _, n := range nodes {
		app, swd := svc[appService(n)], svc[swdService(n)]
		assert.Equal(t, "service:"+appService(n), swd.NetworkMode, "%s shares %s's network namespace", swdService(n), appService(n))
		assert.Equal(t, []string{"/dummyapp"}, app.Entrypoint)
		assert.Equal(t, n, swd.Environment["SWD_NODE_NAME"])
		assert.Equal(t, n, app.Environment["DUMMYAPP_NAME"])
		assert.Equal(t, "http://"+app.Environment["DUMMYAPP_LISTEN"], swd.Environment["SWD_APP"])
		assert.Equal(t, app.Networks["swd"].IPv4Address+":7946", swd.Environment["SWD_ADVERTISE"],
			"%s must advertise its namespace's fixed address (peers reach its gRPC there)", swdService(n))
	}
	d := svc["dispatcher"]
	assert.Equal(t, "dispatcher", d.Environment["SWD_ROLE"])
	assert.Equal(t, d.Networks["swd"].IPv4Address+":7946", d.Environment["SWD_ADVERTISE"])

	for _, name := range append([]string{"dispatcher"}, "swd-0", "swd-1", "swd-2", "swd-3") {
		e := svc[name].Environment
		assert.Equal(t, "true", e["SWD_INSECURE"], "%s: plaintext gRPC beyond loopback", name)
		assert.NotEmpty(t, e["SWD_CONTROL_TOKEN"], "%s: a non-loopback --grpc needs a control token", name)
		for _, v := range []string{"SWD_LISTEN", "SWD_GRPC", "SWD_ADMIN", "SWD_GOSSIP"} {
			assert.True(t, strings.HasPrefix(e[v], "0.0.0.0:"), "%s: %s=%q", name, v, e[v])
		}
		assert.Equal(t, "app-0:7946,app-1:7946,app-2:7946,app-3:7946", e["SWD_JOIN"], "%s joins by service name", name)
	}
}
