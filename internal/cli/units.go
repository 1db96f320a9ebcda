package cli

import "github.com/vramguard/vramguard/internal/units"

// parseBytes reads sizes the way docker's --memory does (units.ParseBytes).
var parseBytes = units.ParseBytes
