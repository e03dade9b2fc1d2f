module cgofixture

go 1.21
