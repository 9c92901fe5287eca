for w in 2 4 2 4; do
  FLARE_WRITERS=$w FLARE_BENCH_PG_ONLY=1 RUST_LOG=error ./flare-timing bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url postgres://postgres@127.0.0.1:5432/postgres 2>wr2-$w.err | sed "s/^/$w /" >> wr2.jsonl
done
