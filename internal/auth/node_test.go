package auth

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// A node MAC is accepted only for the authority it was made for, the
// method it was made for, within the window, under the same key; it never
// carries or prints the secret. Issue 17, item 5.
func TestNodeMAC(t *testing.T) {
	key := DeriveNodeKey("s3cret")
	const method = "/swd.v1.Transfer/Forward"
	ctx := credentials.NewContextWithRequestInfo(context.Background(), credentials.RequestInfo{Method: method})
	md, err := NodeCreds{Key: key}.GetRequestMetadata(ctx, "https://10.0.0.2:7070/swd.v1.Transfer")
	require.NoError(t, err)
	require.Len(t, md, 1)
	for _, v := range md {
		assert.NotContains(t, v, "s3cret")
	}
	incoming := func(authority string) metadata.MD {
		m := metadata.New(md)
		m.Set(":authority", authority)
		return m
	}
	now := time.Now()
	cases := []struct {
		name        string
		md          metadata.MD
		key         NodeKey
		authorities []string
		method      string
		now         time.Time
		want        bool
	}{
		// The receiver it was made for, at once: accepted.
		{"made for this node", incoming("10.0.0.2:7070"), key, []string{"10.0.0.2:7070"}, method, now, true},
		// A member that received it replays it to another node: refused.
		{"replayed to another node", incoming("10.0.0.3:7070"), key, []string{"10.0.0.3:7070"}, method, now, false},
		// Replayed with a forged :authority: the receiver is not that address.
		{"forged authority", incoming("10.0.0.2:7070"), key, []string{"10.0.0.3:7070"}, method, now, false},
		// Used for another method: refused.
		{"another method", incoming("10.0.0.2:7070"), key, []string{"10.0.0.2:7070"}, "/swd.v1.Control/SetPolicy", now, false},
		// After the window: refused.
		{"too late", incoming("10.0.0.2:7070"), key, []string{"10.0.0.2:7070"}, method, now.Add(NodeMACWindow + time.Second), false},
		// Another cluster's key: refused.
		{"other key", incoming("10.0.0.2:7070"), DeriveNodeKey("other"), []string{"10.0.0.2:7070"}, method, now, false},
		// No MAC at all.
		{"none", metadata.Pairs(":authority", "10.0.0.2:7070"), key, nil, method, now, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, validNodeMAC(tc.md, tc.key, tc.authorities, tc.method, tc.now))
		})
	}
	assert.NotEqual(t, key, DeriveNodeKey("s3cret2"))
	assert.True(t, DeriveNodeKey("").IsZero())
	assert.NotContains(t, fmt.Sprintf("%v %+v %#v %s", key, key, key, NodeCreds{Key: key}), string(key.key))
}
