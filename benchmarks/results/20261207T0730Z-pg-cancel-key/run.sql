SELECT cancel_bench('none', false, 20000);
SELECT cancel_bench('btree', false, 20000);
SELECT cancel_bench('hash', false, 20000);
SELECT cancel_bench('btree', true, 20000);
SELECT cancel_bench('hash', true, 20000);
