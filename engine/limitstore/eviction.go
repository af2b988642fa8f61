package limitstore

// evictionPolicies are Redis's and Valkey's maxmemory-policy names.
var evictionPolicies = map[string]bool{
	"noeviction": true, "allkeys-lru": true, "allkeys-lfu": true, "allkeys-random": true,
	"volatile-lru": true, "volatile-lfu": true, "volatile-random": true, "volatile-ttl": true,
}

// EvictionPolicyLabel returns a store's memory policy as a label value from
// a closed set, for the metrics that report it: Redis's and Valkey's
// maxmemory-policy names as they are, "unknown" for "" (the store could not
// read its server's policy), and "other" for anything else, so that what a
// store reports never makes an unbounded (or invalid UTF-8) label.
func EvictionPolicyLabel(policy string) string {
	switch {
	case policy == "":
		return "unknown"
	case evictionPolicies[policy]:
		return policy
	}
	return "other"
}
