package config

import "testing"

func TestDefaultExampleSmoke(t *testing.T) {
	c, err := Parse("example.yaml", DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	m, ok := c.Match("example", []Descriptor{{"path", "/search/x"}})
	t.Logf("%v %+v %+v %+v", ok, m, m.Rules[0], m.Rules[1])
}
