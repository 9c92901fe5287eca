for w in 8 4 2 8 4 16; do
  FLARE_WRITERS=$w FLARE_BENCH_PG_ONLY=1 RUST_LOG=error ./flare-timing bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url postgres://postgres@127.0.0.1:5432/postgres 2>wr-$w.err | sed "s/^/$w /" >> wr.jsonl
done
