package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

func TestPrintRoutes(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, printRoutes(&b, nil))
	assert.Empty(t, b.String(), "no routes learnt: nothing printed")
	rs := []*swdv1.RouteStat{{Name: "GET /work/light", CostSeconds: 0.0101, Samples: 120}, {Name: "GET /work/heavy", CostSeconds: 0.31, Samples: 12}}
	require.NoError(t, printRoutes(&b, rs))
	assert.Equal(t, "\nROUTE            COST       SAMPLES\nGET /work/light  10.100ms   120\nGET /work/heavy  310.000ms  12\n", b.String())
	assert.Equal(t, []routeJSON{{"GET /work/light", 10.1, 120}, {"GET /work/heavy", 310, 12}}, routesJSON(rs))
	assert.Equal(t, []routeJSON{}, routesJSON(nil))
}
