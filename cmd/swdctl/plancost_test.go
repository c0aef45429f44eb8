package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCtl runs swdctl in-process (plan contacts no node).
func runCtl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestParseCosts(t *testing.T) {
	got, err := parseCosts("310:10, 2.5,,0")
	require.NoError(t, err)
	ms := time.Millisecond
	assert.Equal(t, [][]time.Duration{{310 * ms, 10 * ms}, {2500 * time.Microsecond}, nil, {0}}, got)
	for _, bad := range []string{"1:x", "-1", "1::2", "NaN", "1e12"} {
		_, err := parseCosts(bad)
		assert.ErrorContains(t, err, "is not a non-negative number of ms", bad)
	}
}

// TestPlanCosts: `swdctl plan --costs` plans under the work load index:
// node 0's two waiting heavy requests move where count sees balance.
func TestPlanCosts(t *testing.T) {
	out, err := runCtl(t, "plan", "--policy", "nu", "--costs", "310:310:310,10:10:10,10:10:10,10:10:10", "-o", "json")
	require.NoError(t, err)
	assert.JSONEq(t, `{"transfers":[{"from":0,"to":3,"count":1,"work_ms":310},{"from":0,"to":1,"count":1,"work_ms":310}],
		"after":[1,4,3,4],"after_work_ms":[310,340,30,340]}`, out)
	out, err = runCtl(t, "plan", "--policy", "nu", "--loads", "3,3,3,3", "-o", "json")
	require.NoError(t, err)
	assert.JSONEq(t, `{"transfers":[],"after":[3,3,3,3]}`, out, "count: balanced")

	out, err = runCtl(t, "plan", "--policy", "nu-exact", "--costs", "310:310:310,10:10:10,10:10:10,10:10:10")
	require.NoError(t, err)
	assert.Contains(t, out, "FROM  TO  COUNT  WORK")
	assert.Contains(t, out, "before [3 3 3 3] requests, work [930 30 30 30] ms")

	_, err = runCtl(t, "plan", "--policy", "nu")
	require.ErrorContains(t, err, "give --loads (requests per node) or --costs")
	_, err = runCtl(t, "plan", "--policy", "nu", "--loads", "1", "--costs", "1")
	require.ErrorContains(t, err, "not both or neither")
}
