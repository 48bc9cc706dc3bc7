#!/bin/sh
# The last line of `make test`: what was skipped and why, grouped by reason, from the log the
# tests append to (LOCUS_SKIP_LOG; one `reason<TAB>test` line per skip, tests/common/skip.rs).
log="$1"
if [ ! -s "$log" ]; then
    echo "make test: nothing skipped (every kernel tier, model test and VM test ran)"
    exit 0
fi
sort "$log" | uniq | awk -F'\t' '
    { if (!($1 in n)) order[++k] = $1; n[$1]++ }
    END {
        printf "make test: SKIPPED"
        for (i = 1; i <= k; i++)
            printf "%s %s (%d test%s)", (i > 1 ? ";" : ":"), order[i], n[order[i]], (n[order[i]] > 1 ? "s" : "")
        print ""
    }'
