package loadgen

import (
	"fmt"
	"os"
	"os/signal"
	"testing"
	"time"
)

// fakeSwdctlEnv makes the test binary act as `swdctl local up` (see
// fakeSwdctl) instead of running tests.
const fakeSwdctlEnv = "LOADGEN_TEST_FAKE_SWDCTL"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeSwdctlEnv); mode != "" {
		os.Exit(fakeSwdctl(mode))
	}
	os.Exit(m.Run())
}

// fakeSwdctl imitates `swdctl local up`: it prints the address line and
// runs until SIGINT. Modes: "ready" (then exits 0 on SIGINT), "noisy"
// (log lines and a bad JSON line first), "exit" (exits 3 without an address
// line), "stubborn" (ignores SIGINT), "silent" (never prints).
func fakeSwdctl(mode string) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	line := `{"nodes":[{"name":"n0","http":"127.0.0.1:18080","grpc":"127.0.0.1:17070","admin":"127.0.0.1:19100","app":"127.0.0.1:19000"},` +
		`{"name":"n1","http":"127.0.0.1:18081","grpc":"127.0.0.1:17071","admin":"127.0.0.1:19101","app":"127.0.0.1:19001"}],` +
		`"dispatcher":{"http":"127.0.0.1:18090","grpc":"127.0.0.1:17090"}}`
	switch mode {
	case "exit":
		fmt.Fprintln(os.Stderr, "swd: no such binary")
		return 3
	case "silent":
		<-sig
		return 0
	case "noisy":
		fmt.Println("starting 2 nodes...")
		fmt.Println(`{"nodes":[]}`)
	}
	fmt.Println(line)
	if mode == "stubborn" {
		for {
			<-sig
		}
	}
	<-sig
	fmt.Println("stopped") // swdctl may keep writing; loadgen keeps draining
	time.Sleep(10 * time.Millisecond)
	return 0
}
