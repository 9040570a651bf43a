module rampart/bench/resume-client

go 1.25
