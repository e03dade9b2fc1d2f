module spanprof.test/golabels/labels

go 1.21
