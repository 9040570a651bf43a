module rampart/bench/fault-backend

go 1.26.0
