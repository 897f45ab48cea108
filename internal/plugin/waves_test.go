package plugin

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// n returns a node of kind/namespace/name whose key is its name and that
// references the objects named refs.
func n(kind, namespace, name string, refs ...string) node {
	labels := map[string]string{}
	for _, r := range refs {
		labels["ref.dependencies.opendefense.cloud/"+r] = ""
	}
	return newNode(Object{Kind: kind, Namespace: namespace, Name: name}, "ref.dependencies.opendefense.cloud/"+name, labels, false)
}

// waveNames renders the waves as "wave: names" lines, cycles marked.
func waveNames(r OrderResult) []string {
	var out []string
	for _, w := range r.Waves {
		var names []string
		for _, o := range w.Objects {
			s := o.Name
			if o.Namespace != "" {
				s = o.Namespace + "/" + s
			}
			if o.Cycle > 0 {
				s += fmt.Sprintf("(c%d)", o.Cycle)
			}
			names = append(names, s)
		}
		out = append(out, fmt.Sprintf("%d: %s", w.Wave, strings.Join(names, " ")))
	}
	return out
}

func TestPlan(t *testing.T) {
	deleting := n("VirtualMachine", "default", "vm-going", "vpc-b")
	deleting.Deleting = true
	for _, tc := range []struct {
		name   string
		nodes  []node
		waves  []string
		cycles [][]string
	}{
		{name: "nothing", nodes: nil, waves: nil},
		{
			name:  "independent objects go together",
			nodes: []node{n("VPC", "default", "vpc-a"), n("VPC", "default", "vpc-b")},
			waves: []string{"1: default/vpc-a default/vpc-b"},
		},
		{
			name: "a stack of three levels: VMs, then Subnets, then VPCs",
			nodes: []node{
				n("VPC", "default", "vpc-a"), n("Subnet", "default", "subnet-a", "vpc-a"), n("Subnet", "default", "subnet-b", "vpc-a"),
				n("VirtualMachine", "default", "vm-1", "subnet-a", "vpc-a"), n("VirtualMachine", "default", "vm-2", "subnet-b"),
			},
			waves: []string{"1: default/vm-1 default/vm-2", "2: default/subnet-a default/subnet-b", "3: default/vpc-a"},
		},
		{
			name:  "an object waits for the deepest of its dependents",
			nodes: []node{n("VPC", "", "vpc"), n("Subnet", "", "subnet", "vpc"), n("VirtualMachine", "", "vm", "subnet", "vpc")},
			waves: []string{"1: vm", "2: subnet", "3: vpc"},
		},
		{
			name:  "references to objects outside the set are left out",
			nodes: []node{n("VirtualMachine", "default", "vm-1", "vpc-elsewhere")},
			waves: []string{"1: default/vm-1"},
		},
		{
			name:  "a reference to itself is no edge",
			nodes: []node{n("VPC", "default", "vpc-a", "vpc-a")},
			waves: []string{"1: default/vpc-a"},
		},
		{
			name:  "an object being deleted blocks nothing",
			nodes: []node{n("VPC", "default", "vpc-b"), deleting},
			waves: []string{"1: default/vpc-b default/vm-going"},
		},
		{
			name: "the labels name no namespace: an object goes before every object of the name",
			nodes: []node{
				n("VPC", "team-a", "vpc"), n("VPC", "team-b", "vpc"),
				n("VirtualMachine", "team-a", "vm", "vpc"),
			},
			waves: []string{"1: team-a/vm", "2: team-a/vpc team-b/vpc"},
		},
		{
			name: "a cycle takes one wave, after its dependents and before what it references",
			nodes: []node{
				n("VPC", "default", "vpc-x", "gw"), n("VirtualMachine", "default", "gw", "vpc-x", "zone"),
				n("VirtualMachine", "default", "vm-1", "vpc-x"), n("Zone", "", "zone"),
			},
			waves:  []string{"1: default/vm-1", "2: default/vpc-x(c1) default/gw(c1)", "3: zone"},
			cycles: [][]string{{"VPC/default/vpc-x", "VirtualMachine/default/gw"}},
		},
		{
			name: "two cycles",
			nodes: []node{
				n("A", "", "a1", "a2"), n("A", "", "a2", "a3"), n("A", "", "a3", "a1"),
				n("B", "", "b1", "b2"), n("B", "", "b2", "b1"),
			},
			waves:  []string{"1: a1(c1) a2(c1) a3(c1) b1(c2) b2(c2)"},
			cycles: [][]string{{"A/a1", "A/a2", "A/a3"}, {"B/b1", "B/b2"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := plan(tc.nodes)
			if w := waveNames(got); !reflect.DeepEqual(w, tc.waves) {
				t.Errorf("waves:\n%s\nwant:\n%s", strings.Join(w, "\n"), strings.Join(tc.waves, "\n"))
			}
			var cycles [][]string
			for _, c := range got.Cycles {
				var names []string
				for _, o := range c.Objects {
					names = append(names, o.String())
				}
				cycles = append(cycles, names)
			}
			if !reflect.DeepEqual(cycles, tc.cycles) {
				t.Errorf("cycles = %q, want %q", cycles, tc.cycles)
			}
			if got.Waves == nil {
				t.Error("Waves is null, want an empty list")
			}
		})
	}
}

func TestPrintOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    OrderResult
		want []string
	}{
		{name: "empty", r: plan(nil), want: []string{"No objects to order.\n"}},
		{
			name: "one wave",
			r:    plan([]node{n("VPC", "default", "vpc-a"), n("VPC", "default", "vpc-b")}),
			want: []string{"WAVE   KIND   NAMESPACE   NAME\n1      VPC    default     vpc-a\n1      VPC    default     vpc-b\n", "2 objects in 1 wave: none of them references another"},
		},
		{
			name: "a cycle alone",
			r:    plan([]node{n("VPC", "default", "vpc-x", "gw"), n("VirtualMachine", "default", "gw", "vpc-x")}),
			want: []string{"2 objects in 1 wave: delete a wave once", "Cycle 1 (wave 1): VPC/default/vpc-x, VirtualMachine/default/gw reference each other"},
		},
		{
			name: "waves, a cycle, missing objects",
			r: func() OrderResult {
				r := plan([]node{n("VPC", "default", "vpc-x", "gw"), n("VirtualMachine", "default", "gw", "vpc-x"), n("VirtualMachine", "default", "vm-1", "vpc-x")})
				r.Missing = []Object{{Kind: "VPC", Namespace: "default", Name: "vpc-gone"}}
				return r
			}(),
			want: []string{
				"WAVE          KIND             NAMESPACE   NAME\n",
				"1             VirtualMachine   default     vm-1\n",
				"2 (cycle 1)   VPC              default     vpc-x\n",
				"2 (cycle 1)   VirtualMachine   default     gw\n",
				"3 objects in 2 waves: delete a wave once the objects of the waves before it are gone or being deleted",
				"Cycle 1 (wave 2): VPC/default/vpc-x, VirtualMachine/default/gw reference each other, so every DELETE of them is refused: set the annotation dependencies.opendefense.cloud/skip-protection=true on one of them, or delete their namespace (kcp's teardown breaks cycles).\n",
				"1 object of the manifests does not exist: VPC/default/vpc-gone.\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printOrder(&out, tc.r); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestSplitTypes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"vpcs,subnets,virtualmachines"}, []string{"vpcs", "subnets", "virtualmachines"}},
		{[]string{"vpcs", "vm,"}, []string{"vpcs", "vm"}},
		{[]string{"vpc/vpc-a"}, nil},
		{[]string{","}, nil},
		{nil, nil},
	} {
		got, err := splitTypes(tc.args)
		if !reflect.DeepEqual(got, tc.want) || (tc.want == nil) != (err != nil) {
			t.Errorf("splitTypes(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
}
